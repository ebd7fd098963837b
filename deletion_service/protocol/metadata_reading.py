"""Read Pulsar's topic metadata from a metadata store into the reference model, namespace by namespace.

What references a ledger is decided by :mod:`.references`, on decoded nodes; this module reads and
decodes them: every managed ledger of a namespace with its cursors, and every schema locator.  The
orphan scan (one Spark task per namespace) and the leak watcher (one pass over the cluster) read
through it, so both see a topic as the delete phase's reference model does.  A managed ledger is
decoded as far as references go (each ledger's id and offload context), since both decode every
node of a cluster.

Nodes are read undecoded first (:class:`ManagedLedgerNodes`, :class:`SchemaNode`), so that a reader
that reads the same nodes every pass can decode only those that changed (their stamp: each node's
version and creation time).

A node that cannot be read or decoded raises :class:`UnreadableMetadata`: whatever it references is
unknown, so its caller must not conclude that anything it might name is unreferenced.
"""

from __future__ import annotations

import functools
import logging
import struct
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from deletion_service.protocol.references import TopicMetadata
from metastore.formats import decode_cursor, decode_schema_locator
from metastore.formats.managed_ledger import decode_managed_ledger_references
from metastore.formats.pulsar_paths import (
    DOMAIN,
    MANAGED_LEDGERS_ROOT,
    SCHEMAS_ROOT,
    topic_from_managed_ledger_name,
)
from metastore.interface import MetadataStore, MetadataStoreError, MetadataStoreUnavailable, Node

_log = logging.getLogger(__name__)

#: Nodes per ``get_many`` call (the store splits it into multi-reads sized to its replies).
READ_CHUNK = 1000


class UnreadableMetadata(Exception):
    """A node whose references cannot be known; the message names it."""


def namespaces(store: MetadataStore) -> list[tuple[str, str]]:
    """Every (tenant, namespace) with managed ledgers or schemas."""
    found = {(tenant, ns) for root in (MANAGED_LEDGERS_ROOT, SCHEMAS_ROOT)
             for tenant in store.children(root) for ns in store.children(f"{root}/{tenant}")}
    return sorted(found)


def read_nodes(store: MetadataStore, paths: Sequence[str]) -> tuple[dict[str, Node | None], dict[str, str]]:
    """Pipelined reads; when the batch fails for a reason other than the store being down,
    node by node, so a node the store refuses (no access, say) costs that node alone.

    Returns the nodes read and, per path that could not be read, why."""
    try:
        return store.get_many(paths), {}
    except MetadataStoreUnavailable:
        raise
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


@dataclass(frozen=True)
class ManagedLedgerNodes:
    """A managed ledger's node and its cursors' nodes, as read and not yet decoded."""

    path: str
    node: Node
    cursors: tuple[tuple[str, Node], ...]  # (node name, node), by name

    @property
    def topic(self) -> str:
        """``persistent://t/ns/<decoded>``; raises :class:`UnreadableMetadata` for a name that names no topic."""
        return _topic(self.path.removeprefix(MANAGED_LEDGERS_ROOT + "/"))

    def stamp(self) -> bytes:
        """Changes whenever one of these nodes does: each node's version and creation time (a node
        deleted and created again starts over at version 0), the cursors' names, and the version of
        the managed ledger's list of children; packed, as a reader keeps one per topic.  (A node
        name holds no NUL, so the names joined by NUL after the count and the numbers read back
        one way only: :meth:`cursor_names_in`.)"""
        children = self.node.children_version
        numbers = [len(self.cursors), self.node.version, self.node.ctime_ms, -1 if children is None else children]
        for _, node in self.cursors:
            numbers += (node.version, node.ctime_ms)
        names = "\0".join(name for name, _ in self.cursors).encode("utf-8", "surrogatepass")
        return _numbers(len(numbers)).pack(*numbers) + names

    @staticmethod
    def cursor_names_in(stamp: bytes, node: Node) -> tuple[str, ...] | None:
        """The cursors' node names a managed ledger's :meth:`stamp` recorded, when ``node`` (the
        managed ledger's node as read now) shows the same children: the same creation time and
        children version.  None when it may not, or the store does not say."""
        if node.children_version is None or len(stamp) < _COUNT_CTIME_CHILDREN.size:
            return None
        count, _, ctime, children = _COUNT_CTIME_CHILDREN.unpack_from(stamp)
        if (ctime, children) != (node.ctime_ms, node.children_version):
            return None
        names = stamp[8 * (4 + 2 * count):]
        return tuple(names.decode("utf-8", "surrogatepass").split("\0")) if count else ()

    def decoded(self, topic: str | None = None) -> TopicMetadata:
        """The topic's metadata (``topic``: :attr:`topic`, when the caller has it already).
        Raises :class:`UnreadableMetadata`."""
        info = _decoded(self.path, self.node, decode_managed_ledger_references, "managed-ledger")
        # keyed by node name: the cursor's name as Pulsar writes it and stamps its ledgers (pulsar_cursor_name)
        cursors = {name: _decoded(f"{self.path}/{name}", node, decode_cursor, "cursor") for name, node in self.cursors}
        return TopicMetadata(self.topic if topic is None else topic, info, cursors)


@dataclass(frozen=True)
class SchemaNode:
    """A schema locator's node (``/schemas/<tenant>/<ns>/<encoded base topic>``), as read and not yet decoded."""

    path: str
    node: Node

    @property
    def schema_id(self) -> str:
        return self.path.removeprefix(SCHEMAS_ROOT + "/")

    @property
    def topic(self) -> str:
        """The topic the schema belongs to; raises :class:`UnreadableMetadata` for a name that names no topic."""
        tenant, ns, encoded = self.schema_id.split("/")
        return _topic(f"{tenant}/{ns}/{DOMAIN}/{encoded}")

    def stamp(self) -> bytes:
        """Changes whenever the node does (see :meth:`ManagedLedgerNodes.stamp`)."""
        return _stamp(self.node)

    def decoded(self, topic: str | None = None) -> TopicMetadata:
        """The topic's metadata (schema only).  Raises :class:`UnreadableMetadata`."""
        locator = _decoded(self.path, self.node, decode_schema_locator, "schema locator")
        return TopicMetadata(self.topic if topic is None else topic, schema=locator, schema_id=self.schema_id)


class TopicNames:
    """Topic names by node path, remembered from one reading to the next.  Turning a managed-ledger
    or schema path into its topic parses and checks the name (tens of µs); a reader that reads a
    whole cluster every pass meets the same paths every time.  Kept by folder (a namespace's
    managed ledgers, its schemas), each replaced by what its latest reading found."""

    def __init__(self) -> None:
        self._folders: dict[str, dict[str, str]] = {}

    def of(self, folder: str, nodes: Sequence[ManagedLedgerNodes] | Sequence[SchemaNode]) -> list[str]:
        """The topic of each of ``nodes``, all children of ``folder``.  Raises :class:`UnreadableMetadata`."""
        known = self._folders.get(folder, {})
        now: dict[str, str] = {}
        for node in nodes:
            name = node.path.rpartition("/")[2]
            topic = known.get(name)
            now[name] = topic if topic is not None else node.topic
        self._folders[folder] = now
        return [now[node.path.rpartition("/")[2]] for node in nodes]

    def known(self, path: str) -> str | None:
        """The topic of ``path`` as the latest reading of its folder found it (None: not met)."""
        folder, _, name = path.rpartition("/")
        return self._folders.get(folder, {}).get(name)

    def keep_only(self, folders: set[str]) -> None:
        """Forget the folders no longer read (a namespace deleted)."""
        for folder in self._folders.keys() - folders:
            del self._folders[folder]


def managed_ledgers_folder(tenant: str, ns: str) -> str:
    return f"{MANAGED_LEDGERS_ROOT}/{tenant}/{ns}/{DOMAIN}"


def schemas_folder(tenant: str, ns: str) -> str:
    return f"{SCHEMAS_ROOT}/{tenant}/{ns}"


#: ``known_cursors(path, node)``: the cursors' node names of the managed ledger at ``path``, when
#: they are known not to have changed since they were last listed (None: list them).
KnownCursors = Callable[[str, Node], Sequence[str] | None]


def managed_ledger_nodes(store: MetadataStore, tenant: str, ns: str,
                         known_cursors: KnownCursors | None = None) -> list[ManagedLedgerNodes]:
    """Every managed-ledger node of ``tenant/ns`` with its cursors' nodes (a topic deleted since the
    listing: skipped).  The cursors of every topic are listed together (``children_many``: multi-reads
    of a few hundred listings on ZooKeeper), then read together; a topic whose cursors
    ``known_cursors`` names is not listed again."""
    unexpected = [n for n in store.children(f"{MANAGED_LEDGERS_ROOT}/{tenant}/{ns}") if n != DOMAIN]
    if unexpected:  # V1 names (tenant/cluster/ns/persistent/topic) would hide every reference below them
        raise UnreadableMetadata(f"{MANAGED_LEDGERS_ROOT}/{tenant}/{ns} holds {unexpected[:3]} besides {DOMAIN!r}: "
                                 "V1 topic names (tenant/cluster/namespace) are not supported")
    base = managed_ledgers_folder(tenant, ns)
    paths = [f"{base}/{name}" for name in store.children(base)]
    nodes = _read_all(store, paths)
    present = [p for p in paths if nodes[p] is not None]
    cursor_names: dict[str, Sequence[str]] = {}
    if known_cursors is not None:
        for path in present:
            node = nodes[path]
            assert node is not None
            known = known_cursors(path, node)
            if known is not None:
                cursor_names[path] = known
    unlisted = [p for p in present if p not in cursor_names]
    cursor_names.update(store.children_many(unlisted) if unlisted else {})
    cursors = _read_all(store, [f"{p}/{c}" for p in present for c in cursor_names[p]])
    out = []
    for path in present:
        node = nodes[path]
        assert node is not None
        out.append(ManagedLedgerNodes(path, node, tuple(
            (name, cursor) for name in cursor_names[path] if (cursor := cursors[f"{path}/{name}"]) is not None)))
    return out


def topics_of_namespace(store: MetadataStore, pool: ThreadPoolExecutor | None, tenant: str,
                        ns: str) -> Iterator[TopicMetadata]:
    """Every managed ledger of ``tenant/ns`` with its cursors, decoded (:func:`managed_ledger_nodes`).
    ``pool`` is not needed: the cursors are listed by ``children_many``."""
    for nodes in managed_ledger_nodes(store, tenant, ns):
        yield nodes.decoded()


def schema_nodes(store: MetadataStore, tenant: str, ns: str) -> list[SchemaNode]:
    """Every schema locator's node of ``tenant/ns`` (one deleted since the listing, or empty: skipped)."""
    base = schemas_folder(tenant, ns)
    paths = [f"{base}/{name}" for name in store.children(base)]
    nodes = _read_all(store, paths)
    out = []
    for path in paths:
        node = nodes[path]
        if node is None:
            continue  # deleted since the listing
        if not node.data:
            if store.children(path):  # a V1 name's namespace level: its schemas would go unread
                raise UnreadableMetadata(f"{path} is not a schema node but has children: V1 topic names "
                                         "(tenant/cluster/namespace) are not supported")
            continue
        out.append(SchemaNode(path, node))
    return out


def schemas_of_namespace(store: MetadataStore, tenant: str, ns: str) -> Iterator[TopicMetadata]:
    """Every schema locator of ``tenant/ns``, as its topic's metadata (schema only)."""
    for node in schema_nodes(store, tenant, ns):
        yield node.decoded()


_VERSION_AND_CTIME = struct.Struct("!qq")
_COUNT_CTIME_CHILDREN = struct.Struct("!qqqq")  # the start of a managed ledger's stamp


def _stamp(node: Node) -> bytes:
    return _VERSION_AND_CTIME.pack(node.version, node.ctime_ms)


@functools.lru_cache(maxsize=64)
def _numbers(count: int) -> struct.Struct:
    return struct.Struct(f"!{count}q")


def _decoded(path: str, node: Node, decode: Callable[[bytes], Any], what: str) -> Any:
    try:
        return decode(node.data)
    except Exception as e:  # noqa: BLE001 - any decoder surprise on stored bytes
        raise UnreadableMetadata(f"cannot decode the {what} node at {path}: {type(e).__name__}: {e}") from e


def _topic(name: str) -> str:
    """``persistent://t/ns/<decoded>`` of a managed-ledger name, as Pulsar names the topic."""
    try:
        return str(topic_from_managed_ledger_name(name))
    except ValueError as e:
        raise UnreadableMetadata(f"managed-ledger node {MANAGED_LEDGERS_ROOT}/{name} names no topic: {e}") from e


def _read_all(store: MetadataStore, paths: Sequence[str]) -> dict[str, Node | None]:
    nodes: dict[str, Node | None] = {}
    for start in range(0, len(paths), READ_CHUNK):
        got, failed = read_nodes(store, paths[start:start + READ_CHUNK])
        if failed:
            path, why = next(iter(failed.items()))
            raise UnreadableMetadata(f"cannot read {path}: {why}")
        nodes.update(got)
    return nodes
