"""Read Pulsar's topic metadata from a metadata store into the reference model, namespace by namespace.

What references a ledger is decided by :mod:`.references`, on decoded nodes; this module reads and
decodes them: every managed ledger of a namespace with its cursors, and every schema locator.  The
orphan scan (one Spark task per namespace) and the leak watcher (one pass over the cluster) read
through it, so both see a topic as the delete phase's reference model does.

A node that cannot be read or decoded raises :class:`UnreadableMetadata`: whatever it references is
unknown, so its caller must not conclude that anything it might name is unreferenced.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from deletion_service.protocol.references import TopicMetadata
from metastore.formats import decode_cursor, decode_managed_ledger, decode_schema_locator
from metastore.formats.pulsar_paths import (
    DOMAIN,
    MANAGED_LEDGERS_ROOT,
    SCHEMAS_ROOT,
    topic_from_managed_ledger_name,
    url_decode,
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


def topics_of_namespace(store: MetadataStore, pool: ThreadPoolExecutor, tenant: str,
                        ns: str) -> Iterator[TopicMetadata]:
    """Every managed ledger of ``tenant/ns`` with its cursors (a topic deleted since the listing: skipped).
    ``pool`` lists the topics' cursors concurrently (one ``children`` call each)."""
    unexpected = [n for n in store.children(f"{MANAGED_LEDGERS_ROOT}/{tenant}/{ns}") if n != DOMAIN]
    if unexpected:  # V1 names (tenant/cluster/ns/persistent/topic) would hide every reference below them
        raise UnreadableMetadata(f"{MANAGED_LEDGERS_ROOT}/{tenant}/{ns} holds {unexpected[:3]} besides {DOMAIN!r}: "
                                 "V1 topic names (tenant/cluster/namespace) are not supported")
    base = f"{MANAGED_LEDGERS_ROOT}/{tenant}/{ns}/{DOMAIN}"
    paths = [f"{base}/{name}" for name in store.children(base)]
    nodes = _read_all(store, paths)
    present = [p for p in paths if nodes[p] is not None]
    cursor_names = dict(zip(present, pool.map(store.children, present), strict=True))
    cursors = _read_all(store, [f"{p}/{c}" for p in present for c in cursor_names[p]])
    for path in present:
        topic = _topic(path.removeprefix(MANAGED_LEDGERS_ROOT + "/"))
        info = _decoded(path, nodes[path], decode_managed_ledger, "managed-ledger")  # type: ignore[arg-type]
        decoded = {_cursor_name(name): _decoded(f"{path}/{name}", node, decode_cursor, "cursor")
                   for name in cursor_names[path] if (node := cursors[f"{path}/{name}"]) is not None}
        yield TopicMetadata(topic, info, decoded)


def schemas_of_namespace(store: MetadataStore, tenant: str, ns: str) -> Iterator[TopicMetadata]:
    """Every schema locator of ``tenant/ns``, as its topic's metadata (schema only)."""
    base = f"{SCHEMAS_ROOT}/{tenant}/{ns}"
    paths = [f"{base}/{name}" for name in store.children(base)]
    nodes = _read_all(store, paths)
    for path in paths:
        node = nodes[path]
        if node is None:
            continue  # deleted since the listing
        if not node.data:
            if store.children(path):  # a V1 name's namespace level: its schemas would go unread
                raise UnreadableMetadata(f"{path} is not a schema node but has children: V1 topic names "
                                         "(tenant/cluster/namespace) are not supported")
            continue
        encoded = path.rsplit("/", 1)[1]
        topic = _topic(f"{tenant}/{ns}/{DOMAIN}/{encoded}")
        locator = _decoded(path, node, decode_schema_locator, "schema locator")
        yield TopicMetadata(topic, schema=locator, schema_id=f"{tenant}/{ns}/{encoded}")


def _decoded(path: str, node: Node, decode: Callable[[bytes], Any], what: str) -> Any:
    try:
        return decode(node.data)
    except Exception as e:  # noqa: BLE001 - any decoder surprise on stored bytes
        raise UnreadableMetadata(f"cannot decode the {what} node at {path}: {type(e).__name__}: {e}") from e


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
