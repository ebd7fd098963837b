"""Pulsar's references (REFERENCES, OFFLOAD_REFERENCES, TOPICS): one pass, one Spark task per namespace."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from deletion_service.orphans.batching import batched
from deletion_service.orphans.inventory.common import (
    LIST_THREADS,
    READ_CHUNK,
    InventoryError,
    StoreSpec,
    read_nodes,
    table,
)
from deletion_service.orphans.inventory.locations import OffloadScope
from deletion_service.orphans.schemas import (
    OFFLOAD_REFERENCES,
    REFERENCES,
    TOPICS,
)
from deletion_service.protocol.references import Reference, TopicMetadata, UnreadableReference
from metastore.formats import (
    decode_cursor,
    decode_managed_ledger,
    decode_schema_locator,
)
from metastore.formats.pulsar_paths import (
    DOMAIN,
    MANAGED_LEDGERS_ROOT,
    SCHEMAS_ROOT,
    topic_from_managed_ledger_name,
    url_decode,
)
from metastore.interface import MetadataStore, Node

#: Tags of the rows one namespace task yields (one pass over the metadata feeds three tables).
_REF, _OFFLOAD, _TOPIC, _ERROR = range(4)


def _decoded(path: str, node: Node, decode: Callable[[bytes], Any], what: str) -> Any:
    try:
        return decode(node.data)
    except Exception as e:  # noqa: BLE001 - any decoder surprise on stored bytes
        raise _Unreadable(f"cannot decode the {what} node at {path}: {type(e).__name__}: {e}") from e


class _Unreadable(Exception):
    """A node whose references cannot be known; it fails the inventory (see the module's docstring)."""


def topic_rows(meta: TopicMetadata, scope: OffloadScope) -> Iterator[tuple[int, tuple]]:
    """Tagged REFERENCES, OFFLOAD_REFERENCES and TOPICS rows of one topic's metadata, every one
    read off the reference model (:mod:`deletion_service.protocol.references`), the same model the
    delete phase asks "still in use?": the scan never spells out what references a ledger itself.

    A reference the model cannot read (a bucket property that names no ledger) fails the
    inventory like an undecodable node: every ledger it might name would otherwise look orphaned."""
    try:
        refs = list(meta.references())
    except UnreadableReference as e:
        raise _Unreadable(str(e)) from e
    yield from ((_REF, reference_row(ref)) for ref in refs)
    for off in meta.offload_references():
        where = scope.location_of(off.driver_name, dict(off.driver_metadata))
        yield _OFFLOAD, (off.uuid, off.ledger_id, off.topic, where and where.location)


def reference_row(ref: Reference) -> tuple:
    """One REFERENCES row."""
    return (ref.ledger_id, ref.kind.value, ref.topic, ref.detail, ref.offloaded, ref.bookkeeper_deleted)


def _cursor_name(node_name: str) -> str:
    try:
        return url_decode(node_name)
    except ValueError:
        return node_name  # not Pulsar's encoding: the node's own name is the best we know


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
        info = _decoded(path, nodes[path], decode_managed_ledger, "managed-ledger")  # type: ignore[arg-type]
        decoded = {_cursor_name(name): _decoded(f"{path}/{name}", node, decode_cursor, "cursor")
                   for name in cursor_names[path] if (node := cursors[f"{path}/{name}"]) is not None}
        meta = TopicMetadata(topic, info, decoded)
        yield _TOPIC, (topic, tenant, f"{tenant}/{ns}", meta.hidden)
        yield from topic_rows(meta, scope)


def _schemas_of_namespace(store: MetadataStore, tenant: str, ns: str,
                          scope: OffloadScope) -> Iterator[tuple[int, tuple]]:
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
        yield from topic_rows(TopicMetadata(topic, schema=locator, schema_id=f"{tenant}/{ns}/{encoded}"), scope)


def _read_namespaces(store_spec: StoreSpec, scope: OffloadScope,
                     namespaces: Iterable[tuple[str, str]]) -> Iterator[tuple[int, tuple]]:
    """One task: its own client; every topic, cursor and schema of its namespaces, tagged.
    A node that hides references ends the task with one ``_ERROR`` row naming it."""
    with store_spec.open() as store, ThreadPoolExecutor(LIST_THREADS, thread_name_prefix="cursors") as pool:
        for tenant, ns in namespaces:
            try:
                yield from _topics_of_namespace(store, pool, tenant, ns, scope)
                yield from _schemas_of_namespace(store, tenant, ns, scope)
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
        tables = tuple(table(spark, tagged.filter(partial(_tagged, tag)).map(_row), schema)
                       for tag, schema in ((_REF, REFERENCES), (_OFFLOAD, OFFLOAD_REFERENCES), (_TOPIC, TOPICS)))
    finally:
        tagged.unpersist()
    return tables  # type: ignore[return-value]


def _tagged(tag: int, item: tuple[int, tuple]) -> bool:
    return item[0] == tag


def _row(item: tuple[int, tuple]) -> tuple:
    return item[1]
