"""The scan's three inventories, each a Spark job: BookKeeper's ledgers, Pulsar's references, stored objects.

Why Spark tasks do the reading: a cluster holds millions of ledger znodes and one
client reading them one round trip at a time takes hours.  So the work is split
where the storage splits it — BookKeeper's ledger layout into subtrees, Pulsar's
metadata into namespaces, a bucket into ranges of names — and every task opens
its OWN metadata-store client or offloader (clients do not survive pickling, and
one per task keeps tasks independent).  Tasks wait on I/O, not on cores, so each
one keeps its reads in flight: ``get_many`` (a ZooKeeper multi-read) in chunks, the next chunk
requested before the current one is decoded, cursor listings on a few threads;
Spark may run more task slots than cores.

What a task cannot read is said, never skipped silently:

* a ledger znode that does not decode is a row with ``error`` set (never a candidate);
* a managed-ledger, cursor or schema node that does not decode hides references,
  so the whole inventory fails with :class:`InventoryError` naming the node: an
  orphan list computed without it could name a live ledger;
* a storage location that cannot be listed is left out and reported as refused,
  with why (:class:`LocationPlan`): objects never listed are never candidates.

Each inventory is read once and kept (``persist`` + ``count``), so every later
step sees the same moment of the cluster and nothing re-reads ZooKeeper.

Location strings (the ``location`` column of OFFLOAD_REFERENCES and
OFFLOADED_OBJECTS) name where objects live, the same way on both sides:
``s3://<bucket>`` for the S3 family at the provider's default endpoint,
``s3://<bucket>?endpoint=<normalized endpoint>`` otherwise (``aws-s3``, ``S3`` and
``aliyun-oss`` are one family: one bucket written under two driver names is
still one place), ``filesystem://<resolved root>`` for the filesystem driver, and
``<driver>://<bucket>`` for a driver we do not implement (named, never listed).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Any

from pyspark import RDD, StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from deletion_service.config import DeletionConfig
from deletion_service.delete_phase.references import COMPACTED_LEDGER_PROPERTY, COMPACTION_CURSOR
from deletion_service.errors import UserError
from deletion_service.orphans.batching import batched
from deletion_service.orphans.schemas import (
    BK_LEDGERS,
    OFFLOAD_REFERENCES,
    OFFLOADED_OBJECTS,
    REFERENCES,
    TOPICS,
)
from metastore import open_store
from metastore.formats import (
    FormatError,
    LedgerLayout,
    ManagedCursorInfo,
    ManagedLedgerInfo,
    OffloadContext,
    decode_cursor,
    decode_ledger_metadata,
    decode_managed_ledger,
    decode_schema_locator,
    iter_ledger_ids,
    ledger_path,
    read_layout,
)
from metastore.formats.custom_metadata import (
    APPLICATION_KEY,
    COMPACTED_TOPIC_KEY,
    COMPONENT_KEY,
    CURSOR_KEY,
    MANAGED_LEDGER_KEY,
    SCHEMA_ID_KEY,
)
from metastore.formats.ledger_paths import RESERVED_NAMES
from metastore.formats.pulsar_paths import (
    DOMAIN,
    MANAGED_LEDGERS_ROOT,
    SCHEMAS_ROOT,
    topic_from_managed_ledger_name,
    url_decode,
)
from metastore.interface import MetadataStore, MetadataStoreError, MetadataStoreUnavailable, Node
from offloaders.allow_list import (
    FILESYSTEM_DRIVERS,
    S3_FAMILY_DRIVERS,
    decide,
    normalize_driver,
    normalize_endpoint,
)
from offloaders.interface import OffloadError, OffloadTransientError, StorageLocation, java_uuid
from offloaders.registry import OffloaderSettings, offloader_for

_log = logging.getLogger(__name__)

#: Nodes per ``get_many`` call (the store splits it into multi-reads sized to its replies).
READ_CHUNK = 1000
#: Chunks requested ahead of the one being decoded.
READ_AHEAD = 2
#: Threads listing cursors (one ``children`` call per topic) inside one namespace task.
LIST_THREADS = 8


class InventoryError(UserError):
    """An inventory could not be taken as a whole; the message names the node or location."""


@dataclass(frozen=True)
class StoreSpec:
    """How a task opens its own metadata-store client: picklable, unlike a client."""

    url: str
    digest_file: Path | None = None

    def open(self) -> MetadataStore:
        return open_store(self.url, digest_file=self.digest_file)


class ReferenceKind(StrEnum):
    """The ways Pulsar's metadata reaches a ledger (the ``kind`` column of REFERENCES)."""

    LEDGER = "ledger"
    CURSOR = "cursor"
    SCHEMA = "schema"
    COMPACTED = "compacted"


# =========================================================================== BookKeeper ledgers


@dataclass(frozen=True)
class Subtree:
    """One partition of the ledger layout: names below the root, and directory levels left below it."""

    names: tuple[str, ...]
    levels: int


#: The layout's first level: (digits of its name, 4-digit directory levels below it), as
#: ``metastore.formats.ledger_paths`` walks them: short form 2-4-4, long form 3-4-4-4-4.
_FIRST_LEVELS = {LedgerLayout.HIERARCHICAL: ((2, 1), (3, 3)), LedgerLayout.LONG_HIERARCHICAL: ((3, 3),)}


def ledger_subtrees(store: MetadataStore, root: str, layout: LedgerLayout, min_count: int) -> list[Subtree]:
    """The top-level subtrees of the layout, split one level further (first come, first split)
    until there are ``min_count`` of them or nothing is left to split.

    The top level alone is often one subtree (every id below 10^8 lives under ``00``),
    which would be one task; splitting costs one ``children`` call per split subtree."""
    names = [n for n in store.children(root) if n not in RESERVED_NAMES]
    subtrees = [Subtree((n,), levels) for digits, levels in _FIRST_LEVELS[LedgerLayout(layout)]
                for n in sorted(names) if len(n) == digits and n.isascii() and n.isdigit()]
    queue = deque(subtrees)
    while len(subtrees) < min_count and queue:
        subtree = queue.popleft()
        if subtree.levels == 0:
            continue
        path = "/".join((root.rstrip("/"), *subtree.names))
        children = [Subtree((*subtree.names, c), subtree.levels - 1) for c in sorted(store.children(path))
                    if len(c) == 4 and c.isascii() and c.isdigit()]
        at = subtrees.index(subtree)
        subtrees[at:at + 1] = children
        queue.extend(children)
    return subtrees


class _OneSubtree:
    """The store as seen from one subtree: on the path down to it, each level lists only
    the next name, so the format library's own walker (:func:`iter_ledger_ids`) walks it alone."""

    def __init__(self, store: MetadataStore, root: str, subtree: Subtree) -> None:
        self._store = store
        base = root.rstrip("/")
        self._only = {root: [subtree.names[0]]}  # the walker lists the root as it was given
        self._only.update(("/".join((base, *subtree.names[:i])), [subtree.names[i]])
                          for i in range(1, len(subtree.names)))

    def children(self, path: str) -> list[str]:
        return self._only[path] if path in self._only else self._store.children(path)


def bk_row(ledger_id: int, node: Node | None, read_error: str | None = None) -> tuple | None:
    """One BK_LEDGERS row; ``None`` for a znode gone since it was listed (nothing to inventory)."""
    if read_error is not None:
        return (ledger_id, None, None, None, None, None, None, None, None, None, None, read_error)
    if node is None:
        return None
    try:
        meta = decode_ledger_metadata(node.data)
    except Exception as e:  # noqa: BLE001 - bytes anyone can write: any decoder surprise is an error row
        return (ledger_id, None, node.ctime_ms, None, None, None, None, None, None, None, None,
                f"{type(e).__name__}: {e}")
    custom = {k: v.decode("utf-8", errors="replace") for k, v in meta.custom_metadata.items()}
    return (ledger_id, meta.state, meta.ctime_or(node.ctime_ms), meta.length, custom.get(APPLICATION_KEY),
            custom.get(COMPONENT_KEY), custom.get(MANAGED_LEDGER_KEY), custom.get(CURSOR_KEY),
            custom.get(SCHEMA_ID_KEY), custom.get(COMPACTED_TOPIC_KEY), custom, None)


def read_nodes(store: MetadataStore, paths: Sequence[str]) -> tuple[dict[str, Node | None], dict[str, str]]:
    """Pipelined reads; when the batch fails for a reason other than the store being down,
    node by node, so a node the store refuses (no access, say) costs that node alone.

    Returns the nodes read and, per path that could not be read, why."""
    try:
        return store.get_many(paths), {}
    except MetadataStoreUnavailable:
        raise  # the task fails; Spark retries it
    except MetadataStoreError:
        _log.warning("a batched metadata read failed; reading %d node(s) one by one", len(paths))
    nodes: dict[str, Node | None] = {}
    failed: dict[str, str] = {}
    for path in paths:
        try:
            nodes[path] = store.get(path)
        except MetadataStoreUnavailable:
            raise
        except MetadataStoreError as e:
            failed[path] = f"{type(e).__name__}: {e}"
    return nodes, failed


def _ledger_rows(store: MetadataStore, root: str, layout: LedgerLayout, ids: Iterable[int]) -> Iterator[tuple]:
    """Rows of ``ids``, READ_AHEAD chunks in flight while one is decoded (and the walk goes on)."""
    def read(chunk: list[tuple[int, str]]) -> tuple[list[tuple[int, str]], dict[str, Node | None], dict[str, str]]:
        return chunk, *read_nodes(store, [path for _, path in chunk])

    def rows(done: Future) -> Iterator[tuple]:
        chunk, nodes, failed = done.result()
        for lid, path in chunk:
            row = bk_row(lid, nodes.get(path), failed.get(path))
            if row is not None:
                yield row

    pending: deque[Future] = deque()
    with ThreadPoolExecutor(max_workers=READ_AHEAD, thread_name_prefix="bk-read") as pool:
        for chunk in batched(((lid, ledger_path(root, lid, layout)) for lid in ids), READ_CHUNK):
            pending.append(pool.submit(read, chunk))
            if len(pending) > READ_AHEAD:
                yield from rows(pending.popleft())
        while pending:
            yield from rows(pending.popleft())


def _read_subtrees(store_spec: StoreSpec, root: str, layout: LedgerLayout,
                   subtrees: Iterable[Subtree]) -> Iterator[tuple]:
    """One task: its own client, its subtrees walked and read."""
    with store_spec.open() as store:
        for subtree in subtrees:
            ids = iter_ledger_ids(_OneSubtree(store, root, subtree), root, layout)
            yield from _ledger_rows(store, root, layout, ids)


def _table(spark: SparkSession, rdd: RDD, schema: StructType) -> DataFrame:
    """Rows our own code built with the schema's types: Spark's per-row type check is skipped
    (it costs more than decoding the row did)."""
    return _kept(spark.createDataFrame(rdd, schema, verifySchema=False))


def _kept(df: DataFrame) -> DataFrame:
    """Read once, now: later steps see one moment of the cluster and never re-read it."""
    df = df.persist(StorageLevel.MEMORY_AND_DISK)
    df.count()
    return df


def bk_ledgers(spark: SparkSession, store: StoreSpec, root: str = "/ledgers",
               min_partitions: int | None = None) -> DataFrame:
    """Every ledger znode under ``root`` (BK_LEDGERS), one task per subtree of the layout.

    ``min_partitions`` (default: four per task slot) is how many subtrees the
    layout is split into at least, when it has that many."""
    with store.open() as client:
        try:
            layout = read_layout(client, root)
        except FormatError as e:
            raise InventoryError(f"BookKeeper ledger layout: {e} (check --bookkeeper-metadata-store and "
                                 "bookkeeperLedgersRootPath)") from e
        subtrees = ledger_subtrees(client, root, layout, min_partitions or 4 * spark.sparkContext.defaultParallelism)
    if not subtrees:
        return _kept(spark.createDataFrame([], BK_LEDGERS))
    rdd = spark.sparkContext.parallelize(subtrees, len(subtrees)).mapPartitions(
        partial(_read_subtrees, store, root, layout))
    return _table(spark, rdd, BK_LEDGERS)


# =========================================================================== where offloaded objects live


@dataclass(frozen=True)
class ObjectLocation:
    """One place offloaded objects live: its ``location`` string and how to list it."""

    location: str
    driver: str
    metadata: tuple[tuple[str, str], ...] = ()

    @property
    def storage(self) -> StorageLocation:
        return StorageLocation(self.driver, dict(self.metadata))

    @property
    def is_s3(self) -> bool:
        return normalize_driver(self.driver) in S3_FAMILY_DRIVERS


_S3 = "s3://"
_FILESYSTEM = "filesystem://"
_ENDPOINT = "?endpoint="
#: The filesystem driver's root key (``offloaders.filesystem.STORAGE_BASE_PATH_KEY``).
_STORAGE_BASE_PATH = "storageBasePath"


@dataclass(frozen=True)
class OffloadScope:
    """What the configuration says about tiered storage, for naming and listing locations.

    ``fallback_*``: the cluster's ``managedLedgerOffload*`` settings, where objects of an
    offload context without driver metadata went (as ``mark_phase.pick`` reads them)."""

    settings: OffloaderSettings = field(default_factory=OffloaderSettings)
    fallback_driver: str | None = None
    fallback_metadata: tuple[tuple[str, str], ...] = ()
    allowed_buckets: tuple[str, ...] = ()

    @classmethod
    def of(cls, config: DeletionConfig, settings: OffloaderSettings | None = None) -> OffloadScope:
        """From the config (``settings`` as the CLI built them, e.g. the embedded offload dir)."""
        keys = {"bucket": config.managed_ledger_offload_bucket, "region": config.managed_ledger_offload_region,
                "serviceEndpoint": config.managed_ledger_offload_service_endpoint}
        driver = (config.managed_ledger_offload_driver or "").strip() or None
        return cls(settings or OffloaderSettings.from_config(config.camel()), driver,
                   tuple((k, v) for k, v in keys.items() if v), tuple(config.offload_allowed_buckets))

    def location_of(self, driver: str | None, metadata: Mapping[str, str]) -> ObjectLocation | None:
        """Where an offload context's objects went; ``None`` when it cannot be told (no driver
        recorded and none configured, or an S3 target without a bucket)."""
        if not driver:
            if self.fallback_driver is None:
                return None
            driver, metadata = self.fallback_driver, {**dict(self.fallback_metadata), **metadata}
        name = normalize_driver(driver)
        if name in S3_FAMILY_DRIVERS:
            bucket = (metadata.get("bucket") or "").strip()
            if not bucket:
                return None
            endpoint = normalize_endpoint(metadata.get("serviceEndpoint") or metadata.get("endpoint"))
            keep = {"bucket": bucket, "serviceEndpoint": endpoint, "region": (metadata.get("region") or "").strip()}
            return ObjectLocation(f"{_S3}{bucket}" + (f"{_ENDPOINT}{endpoint}" if endpoint else ""), driver,
                                  tuple((k, v) for k, v in keep.items() if v))
        if name in FILESYSTEM_DRIVERS:
            root = self._filesystem_root(metadata.get(_STORAGE_BASE_PATH))
            return None if root is None else ObjectLocation(f"{_FILESYSTEM}{root}", driver,
                                                            ((_STORAGE_BASE_PATH, str(root)),))
        return ObjectLocation(f"{name}://{metadata.get('bucket') or ''}", driver, tuple(sorted(metadata.items())))

    def _filesystem_root(self, raw: str | None) -> Path | None:
        """The directory a filesystem offload wrote under, as ``FileSystemOffloader`` resolves it."""
        base = self.settings.filesystem_base_dir
        text = (raw or "").strip()
        if not text or text == "null":  # upstream writes "null" when hadoop.tmp.dir is unset
            return base.resolve() if base is not None else None
        text = text.removeprefix("file://")
        if "://" in text:
            return None
        path = Path(text)
        if path.is_absolute():
            return path.resolve()
        return (base / path).resolve() if base is not None else None

    def parse(self, location: str) -> ObjectLocation | None:
        """A ``location`` string back into something to list (region from the config);
        ``None`` for a driver we do not implement."""
        if location.startswith(_S3):
            bucket, _, endpoint = location[len(_S3):].partition(_ENDPOINT)
            region = dict(self.fallback_metadata).get("region", "")
            return self.location_of(self._s3_driver(), {"bucket": bucket, "serviceEndpoint": endpoint,
                                                        "region": region})
        if location.startswith(_FILESYSTEM):
            return self.location_of("filesystem", {_STORAGE_BASE_PATH: location[len(_FILESYSTEM):]})
        return None

    def _s3_driver(self) -> str:
        """The S3-family driver name to list with: any allowed one lists the same way, so the
        configured one if allowed, else the first allowed (else the configured, to be refused)."""
        allowed = self.settings.allow.drivers & S3_FAMILY_DRIVERS
        preferred = normalize_driver(self.fallback_driver or "")
        if preferred in allowed or not allowed:
            return preferred or "aws-s3"
        return sorted(allowed)[0]

    def configured(self) -> list[ObjectLocation]:
        """The locations the configuration names: the cluster's offload bucket, the allowed
        buckets (at the configured endpoint), the filesystem base directory."""
        fallback = dict(self.fallback_metadata)
        found = [self.location_of(self.fallback_driver, {})] if self.fallback_driver else []
        found += [self.location_of(self._s3_driver(), {**fallback, "bucket": b}) for b in self.allowed_buckets]
        if self.settings.filesystem_base_dir is not None:
            found.append(self.location_of("filesystem", {}))
        return [loc for loc in found if loc is not None]

    def refusal(self, location: ObjectLocation) -> str | None:
        """Why the allow-list refuses to list ``location`` (``None``: allowed)."""
        md = dict(location.metadata)
        decision = decide(self.settings.allow, location.driver, md.get("bucket"), md.get("serviceEndpoint"))
        return None if decision else decision.reason


@dataclass(frozen=True)
class LocationPlan:
    """Which locations the object inventory lists, and which it leaves out and why."""

    listed: list[ObjectLocation]
    refused: dict[str, str]  # location string -> reason it is not listed


def object_locations(scope: OffloadScope, offload_references: DataFrame) -> LocationPlan:
    """The locations to list: every distinct one the references name (a small collect), then
    the configured ones; each checked against the allow-list and tried once on the driver, so
    a missing bucket or a wrong endpoint is reported here rather than failing a task."""
    named = [r.location for r in offload_references.select("location").where("location IS NOT NULL")
             .distinct().orderBy("location").collect()]
    listed: dict[str, ObjectLocation] = {}
    refused: dict[str, str] = {}
    for text, location in [*((t, scope.parse(t)) for t in named), *((c.location, c) for c in scope.configured())]:
        if text in refused or text in listed:
            continue
        why = "offload driver not implemented" if location is None else (
            scope.refusal(location) or _probe(location, scope.settings))
        if location is not None and why is None:
            listed[text] = location
        else:
            _log.warning("not listing offloaded objects at %s: %s", text, why)
            refused[text] = str(why)
    return LocationPlan(list(listed.values()), refused)


def _probe(location: ObjectLocation, settings: OffloaderSettings) -> str | None:
    """List one page at ``location``; why it cannot be listed, or ``None``.  A transient failure
    fails the scan (try again later) instead of leaving a location out."""
    try:
        next(iter(offloader_for(location.driver, settings).list_objects(location.storage)), None)
    except OffloadTransientError as e:
        raise InventoryError(f"listing offloaded objects at {location.location}: {e} (try again later)") from e
    except OffloadError as e:
        return str(e)
    return None


# =========================================================================== Pulsar's references

#: Tags of the rows one namespace task yields (one pass over the metadata feeds three tables).
_REF, _OFFLOAD, _TOPIC, _ERROR = range(4)


def _decoded(path: str, node: Node, decode: Callable[[bytes], Any], what: str) -> Any:
    try:
        return decode(node.data)
    except Exception as e:  # noqa: BLE001 - any decoder surprise on stored bytes
        raise _Unreadable(f"cannot decode the {what} node at {path}: {type(e).__name__}: {e}") from e


class _Unreadable(Exception):
    """A node whose references cannot be known; it fails the inventory (see the module's docstring)."""


def offload_rows(ledger_id: int, topic: str, ctx: OffloadContext, scope: OffloadScope) -> Iterator[tuple]:
    """OFFLOAD_REFERENCES rows of one offload context: its per-ledger uuid, then each segment's
    (a segment's own driver metadata, else the context's).  A zero uuid is protobuf's "unset"."""
    here = scope.location_of(ctx.driver_name, ctx.driver_metadata)
    if ctx.uid_msb or ctx.uid_lsb:
        yield (java_uuid(ctx.uid_msb or 0, ctx.uid_lsb or 0), ledger_id, topic, here and here.location)
    for seg in ctx.segments:
        if seg.uid_msb or seg.uid_lsb:
            where = scope.location_of(seg.driver_name, seg.driver_metadata) if seg.driver_name else here
            yield (java_uuid(seg.uid_msb or 0, seg.uid_lsb or 0), ledger_id, topic, where and where.location)


def managed_ledger_rows(topic: str, info: ManagedLedgerInfo, scope: OffloadScope) -> Iterator[tuple[int, tuple]]:
    """Tagged REFERENCES (kind ledger) and OFFLOAD_REFERENCES rows of one managed ledger."""
    for ledger in info.ledgers:
        ctx = ledger.offload_context
        offloaded = ctx is not None and bool(ctx.complete)
        deleted = ctx is not None and bool(ctx.bookkeeper_deleted)
        yield _REF, (ledger.ledger_id, ReferenceKind.LEDGER.value, topic, None, offloaded, deleted)
        if ctx is not None:
            yield from ((_OFFLOAD, row) for row in offload_rows(ledger.ledger_id, topic, ctx, scope))


def cursor_rows(topic: str, node_name: str, cursor: ManagedCursorInfo) -> Iterator[tuple]:
    """REFERENCES rows of one cursor: its cursor ledger (state kept in BookKeeper), and for
    ``__compaction`` the compacted-topic ledger (as ``delete_phase.references`` counts them)."""
    try:
        name = url_decode(node_name)
    except ValueError:
        name = node_name  # not Pulsar's encoding: the node's own name is the best we know
    if not cursor.state_in_metadata_store and cursor.cursors_ledger_id >= 0:
        yield (cursor.cursors_ledger_id, ReferenceKind.CURSOR.value, topic, name, False, False)
    if name == COMPACTION_CURSOR and COMPACTED_LEDGER_PROPERTY in cursor.properties:
        yield (cursor.properties[COMPACTED_LEDGER_PROPERTY], ReferenceKind.COMPACTED.value, topic, None, False, False)


def _topic(name: str) -> str:
    """``persistent://t/ns/<decoded>`` of a managed-ledger name, as Pulsar names the topic."""
    try:
        return str(topic_from_managed_ledger_name(name))
    except ValueError as e:
        raise _Unreadable(f"managed-ledger node {MANAGED_LEDGERS_ROOT}/{name} names no topic: {e}") from e


def _read_all(store: MetadataStore, paths: Sequence[str]) -> dict[str, Node | None]:
    nodes: dict[str, Node | None] = {}
    for chunk in batched(paths, READ_CHUNK):
        got, failed = read_nodes(store, chunk)
        if failed:
            path, why = next(iter(failed.items()))
            raise _Unreadable(f"cannot read {path}: {why}")
        nodes.update(got)
    return nodes


def _topics_of_namespace(store: MetadataStore, pool: ThreadPoolExecutor, tenant: str, ns: str,
                         scope: OffloadScope) -> Iterator[tuple[int, tuple]]:
    unexpected = [n for n in store.children(f"{MANAGED_LEDGERS_ROOT}/{tenant}/{ns}") if n != DOMAIN]
    if unexpected:  # V1 names (tenant/cluster/ns/persistent/topic) would hide every reference below them
        raise _Unreadable(f"{MANAGED_LEDGERS_ROOT}/{tenant}/{ns} holds {unexpected[:3]} besides {DOMAIN!r}: "
                          "V1 topic names (tenant/cluster/namespace) are not supported")
    base = f"{MANAGED_LEDGERS_ROOT}/{tenant}/{ns}/{DOMAIN}"
    paths = [f"{base}/{name}" for name in store.children(base)]
    nodes = _read_all(store, paths)
    present = [p for p in paths if nodes[p] is not None]  # a topic deleted since the listing: gone
    cursor_names = dict(zip(present, pool.map(store.children, present), strict=True))
    cursors = _read_all(store, [f"{p}/{c}" for p in present for c in cursor_names[p]])
    for path in present:
        topic = _topic(path.removeprefix(MANAGED_LEDGERS_ROOT + "/"))
        yield _TOPIC, (topic, tenant, f"{tenant}/{ns}")
        info = _decoded(path, nodes[path], decode_managed_ledger, "managed-ledger")  # type: ignore[arg-type]
        yield from managed_ledger_rows(topic, info, scope)
        for name in cursor_names[path]:
            node = cursors[f"{path}/{name}"]
            if node is not None:
                cursor = _decoded(f"{path}/{name}", node, decode_cursor, "cursor")
                yield from ((_REF, row) for row in cursor_rows(topic, name, cursor))


def _schemas_of_namespace(store: MetadataStore, tenant: str, ns: str) -> Iterator[tuple[int, tuple]]:
    base = f"{SCHEMAS_ROOT}/{tenant}/{ns}"
    paths = [f"{base}/{name}" for name in store.children(base)]
    nodes = _read_all(store, paths)
    for path in paths:
        node = nodes[path]
        if node is None:
            continue  # deleted since the listing
        if not node.data:
            if store.children(path):  # a V1 name's namespace level: its schemas would go unread
                raise _Unreadable(f"{path} is not a schema node but has children: V1 topic names "
                                  "(tenant/cluster/namespace) are not supported")
            continue
        encoded = path.rsplit("/", 1)[1]
        topic = _topic(f"{tenant}/{ns}/{DOMAIN}/{encoded}")
        locator = _decoded(path, node, decode_schema_locator, "schema locator")
        for ledger_id in locator.ledger_ids():
            yield _REF, (ledger_id, ReferenceKind.SCHEMA.value, topic, f"{tenant}/{ns}/{encoded}", False, False)


def _read_namespaces(store_spec: StoreSpec, scope: OffloadScope,
                     namespaces: Iterable[tuple[str, str]]) -> Iterator[tuple[int, tuple]]:
    """One task: its own client; every topic, cursor and schema of its namespaces, tagged.
    A node that hides references ends the task with one ``_ERROR`` row naming it."""
    with store_spec.open() as store, ThreadPoolExecutor(LIST_THREADS, thread_name_prefix="cursors") as pool:
        for tenant, ns in namespaces:
            try:
                yield from _topics_of_namespace(store, pool, tenant, ns, scope)
                yield from _schemas_of_namespace(store, tenant, ns)
            except _Unreadable as e:
                yield _ERROR, (str(e),)
                return


def _namespaces(store: MetadataStore) -> list[tuple[str, str]]:
    """Every (tenant, namespace) with managed ledgers or schemas."""
    found = {(tenant, ns) for root in (MANAGED_LEDGERS_ROOT, SCHEMAS_ROOT)
             for tenant in store.children(root) for ns in store.children(f"{root}/{tenant}")}
    return sorted(found)


def pulsar_references(spark: SparkSession, store: StoreSpec,
                      scope: OffloadScope | None = None) -> tuple[DataFrame, DataFrame, DataFrame]:
    """(REFERENCES, OFFLOAD_REFERENCES, TOPICS): one pass over Pulsar's metadata, one task per namespace.

    ``scope`` names where offloaded objects went (the ``location`` column); without it only
    recorded S3 driver metadata can be named.  Raises :class:`InventoryError` when a
    managed-ledger, cursor or schema node cannot be read or decoded."""
    scope = scope or OffloadScope()
    with store.open() as client:
        namespaces = _namespaces(client)
    tagged = spark.sparkContext.parallelize(namespaces, max(1, len(namespaces))).mapPartitions(
        partial(_read_namespaces, store, scope)).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        tagged.count()
        errors = [row[0] for row in tagged.filter(partial(_tagged, _ERROR)).map(_row).take(3)]
        if errors:
            raise InventoryError("Pulsar metadata that hides references (no orphan list is safe without "
                                 "it): " + "; ".join(errors))
        tables = tuple(_table(spark, tagged.filter(partial(_tagged, tag)).map(_row), schema)
                       for tag, schema in ((_REF, REFERENCES), (_OFFLOAD, OFFLOAD_REFERENCES), (_TOPIC, TOPICS)))
    finally:
        tagged.unpersist()
    return tables  # type: ignore[return-value]


def _tagged(tag: int, item: tuple[int, tuple]) -> bool:
    return item[0] == tag


def _row(item: tuple[int, tuple]) -> tuple:
    return item[1]


# =========================================================================== offloaded objects


@dataclass(frozen=True)
class NameRange:
    """A range of object names one task lists: ``prefix``-ed, after ``start_after``, before ``end``;
    ``skip_hex`` drops names starting with a lower-case hex digit (another task's prefix)."""

    prefix: str = ""
    start_after: str | None = None
    end: str | None = None
    skip_hex: bool = False


_HEX = "0123456789abcdef"
_LAST = "\U0010ffff"
#: A bucket split by the first character of an offload uuid, plus the three gaps around those
#: sixteen prefixes, so a name that is no offload object (``other``) is listed too, exactly once.
S3_RANGES = (
    *(NameRange(prefix=c) for c in _HEX),
    NameRange(end="0", skip_hex=True),
    NameRange(start_after="9" + _LAST, end="a", skip_hex=True),
    NameRange(start_after="f" + _LAST, skip_hex=True),
)


def _list_range(settings: OffloaderSettings, location: ObjectLocation, names: NameRange) -> Iterator[tuple]:
    """OFFLOADED_OBJECTS rows of one range of one location (the offloader lists in name order)."""
    offloader = offloader_for(location.driver, settings)
    for head in offloader.list_objects(location.storage, names.prefix, names.start_after):
        if names.end is not None and head.name >= names.end:
            return
        if names.skip_hex and head.name[:1] in _HEX:
            continue
        parsed = offloader.describe_object(head.name)
        yield (location.location, head.name, parsed.uuid, parsed.ledger_id, parsed.kind.value, head.size,
               head.last_modified_ms or 0)


def _list_tasks(settings: OffloaderSettings, tasks: Iterable[tuple[ObjectLocation, NameRange]]) -> Iterator[tuple]:
    for location, names in tasks:
        yield from _list_range(settings, location, names)


def offloaded_objects(spark: SparkSession, locations: Sequence[ObjectLocation],
                      settings: OffloaderSettings | None = None) -> DataFrame:
    """Every object at ``locations`` (OFFLOADED_OBJECTS): an S3 bucket as 19 ranges of names,
    each a task with its own offloader and client; a filesystem root as one task.

    ``settings`` carry the allow-list, checked again by the offloader in every task."""
    settings = settings or OffloaderSettings()
    tasks = [(loc, names) for loc in locations for names in (S3_RANGES if loc.is_s3 else (NameRange(),))]
    if not tasks:
        return _kept(spark.createDataFrame([], OFFLOADED_OBJECTS))
    rdd = spark.sparkContext.parallelize(tasks, len(tasks)).mapPartitions(partial(_list_tasks, settings))
    return _table(spark, rdd, OFFLOADED_OBJECTS)
