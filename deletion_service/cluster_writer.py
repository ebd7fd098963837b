"""Write cluster state the way Pulsar and BookKeeper do: for the demo, the embedded mode and tests.

Every node goes through the same encoders the daemon decodes with, and the
custom metadata is what a broker writes when it creates each kind of ledger,
so a state built here is indistinguishable (to us) from a real cluster's.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from metastore.formats import (
    IndexEntry,
    LedgerInfo,
    LedgerLayout,
    LedgerMetadata,
    ManagedCursorInfo,
    ManagedLedgerInfo,
    Position,
    SchemaLocator,
    Segment,
    cursor_path,
    encode_cursor,
    encode_ledger_metadata,
    encode_managed_ledger,
    encode_schema_locator,
    ledger_path,
    managed_ledger_name,
    managed_ledger_path,
    pulsar_cursor_name,
    schema_id,
    schema_path,
)
from metastore.formats.custom_metadata import (
    APPLICATION_KEY,
    APPLICATION_PULSAR,
    COMPACTED_TOPIC_KEY,
    COMPONENT_COMPACTED_LEDGER,
    COMPONENT_DELAYED_INDEX_BUCKET,
    COMPONENT_KEY,
    COMPONENT_MANAGED_LEDGER,
    COMPONENT_SCHEMA,
    CURSOR_KEY,
    MANAGED_LEDGER_KEY,
    SCHEMA_ID_KEY,
)
from metastore.interface import ABSENT, ANY, MetadataStore

LAYOUT_TEXT = {
    LedgerLayout.HIERARCHICAL: "2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1\n",
    LedgerLayout.LONG_HIERARCHICAL: "2\norg.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory:1\n",
}


def pulsar_custom_metadata(topic: str, cursor: str | None = None) -> dict[str, str]:
    """What a broker stamps on a data ledger of ``topic`` (with ``cursor``, a subscription: on the
    ledger of that subscription's cursor).  The stamp is the cursor's name, the subscription
    URL-encoded (:func:`~metastore.formats.pulsar_cursor_name`), as upstream's ``ManagedCursorImpl``
    stamps it: subscription ``a b`` is ``pulsar/cursor=a+b``, and ``a+b`` is ``a%2Bb``."""
    meta = {APPLICATION_KEY: APPLICATION_PULSAR, COMPONENT_KEY: COMPONENT_MANAGED_LEDGER,
            MANAGED_LEDGER_KEY: managed_ledger_name(topic)}
    if cursor is not None:
        meta[CURSOR_KEY] = pulsar_cursor_name(cursor)
    return meta


def schema_custom_metadata(topic: str) -> dict[str, str]:
    """What the schema registry stamps on a schema ledger of ``topic``."""
    return {APPLICATION_KEY: APPLICATION_PULSAR, COMPONENT_KEY: COMPONENT_SCHEMA, SCHEMA_ID_KEY: schema_id(topic)}


def compacted_custom_metadata(topic: str) -> dict[str, str]:
    """What the compactor stamps on a compacted ledger of ``topic`` (a full topic name)."""
    return {APPLICATION_KEY: APPLICATION_PULSAR, COMPONENT_KEY: COMPONENT_COMPACTED_LEDGER,
            COMPACTED_TOPIC_KEY: str(topic)}


def bucket_custom_metadata(topic: str, cursor: str) -> dict[str, str]:
    """What a delayed-delivery tracker stamps on a bucket snapshot ledger of the subscription
    ``cursor`` (PIP-195).  Unlike a cursor ledger's stamp, this one is the subscription itself:
    upstream's ``ImmutableBucket.asyncSaveBucketSnapshot`` hands the snapshot storage
    ``Codec.decode(cursor.getName())`` (``pulsar-broker/.../delayed/bucket/ImmutableBucket.java``)."""
    return {APPLICATION_KEY: APPLICATION_PULSAR, COMPONENT_KEY: COMPONENT_DELAYED_INDEX_BUCKET,
            MANAGED_LEDGER_KEY: managed_ledger_name(topic), CURSOR_KEY: cursor}


class ClusterWriter:
    def __init__(self, store: MetadataStore, bookkeeper_store: MetadataStore | None = None,
                 ledgers_root: str = "/ledgers", layout: LedgerLayout = LedgerLayout.HIERARCHICAL) -> None:
        self.store = store
        self.bk_store = bookkeeper_store or store
        self.root = ledgers_root
        self.layout = layout

    def ensure_layout(self) -> None:
        path = f"{self.root}/LAYOUT"
        if self.bk_store.get(path) is None:
            self.bk_store.put(path, LAYOUT_TEXT[self.layout].encode(), ABSENT)

    def bk_ledger(self, ledger_id: int, custom: dict[str, str], state: str = "CLOSED", ctime_ms: int | None = None,
                  entries: int = 10, size: int = 1024) -> str:
        """Create a ledger's znode (the ledger *is* its znode, for deletion purposes)."""
        meta = LedgerMetadata(
            quorum_size=2, ensemble_size=3, ack_quorum_size=2, state=state,
            length=size if state == "CLOSED" else 0, last_entry_id=entries - 1 if state == "CLOSED" else -1,
            segments=[Segment(0, ["bookie-1:3181", "bookie-2:3181", "bookie-3:3181"])], digest_type="CRC32C",
            password=b"", ctime=int(time.time() * 1000) if ctime_ms is None else ctime_ms,
            custom_metadata={k: v.encode() for k, v in custom.items()},
        )
        path = ledger_path(self.root, ledger_id, self.layout)
        self.bk_store.put(path, encode_ledger_metadata(meta), ABSENT)
        return path

    def delete_bk_ledger(self, ledger_id: int) -> None:
        """What BookKeeper does when it deletes a ledger: its znode goes (at the version read)."""
        path = ledger_path(self.root, ledger_id, self.layout)
        node = self.bk_store.get(path)
        if node is not None:
            self.bk_store.delete(path, node.version)

    def managed_ledger(self, topic: str, ledgers: Iterable[LedgerInfo | int],
                       properties: dict[str, str] | None = None) -> str:
        infos = [lg if isinstance(lg, LedgerInfo) else LedgerInfo(lg, entries=10, size=1024,
                                                                  timestamp=int(time.time() * 1000))
                 for lg in ledgers]
        path = managed_ledger_path(topic)
        self.store.put(path, encode_managed_ledger(ManagedLedgerInfo(infos, dict(properties or {}))), ANY)
        return path

    def cursor(self, topic: str, name: str, mark_delete: Position, cursors_ledger_id: int = -1,
               properties: dict[str, int] | None = None, cursor_properties: dict[str, str] | None = None) -> str:
        """The cursor node of subscription ``name``, under its cursor's (encoded) name."""
        info = ManagedCursorInfo(cursors_ledger_id, mark_delete, properties=dict(properties or {}),
                                 cursor_properties=dict(cursor_properties or {}), last_active=int(time.time() * 1000))
        path = cursor_path(topic, name)
        self.store.put(path, encode_cursor(info), ANY)
        return path

    def schema(self, topic: str, ledger_ids: list[int]) -> str:
        entries = [IndexEntry(version=i, position=Position(lid, 0), hash=b"h") for i, lid in enumerate(ledger_ids)]
        locator = SchemaLocator(info=entries[-1], index=entries)
        path = schema_path(topic)
        self.store.put(path, encode_schema_locator(locator), ANY)
        return path
