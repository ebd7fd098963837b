"""The one reference model, kind by kind, without servers (it is a pure function of decoded nodes)."""

from __future__ import annotations

import pytest

from deletion_service.protocol.references import (
    LedgerKind,
    ReferenceKind,
    TopicMetadata,
    UnreadableReference,
    ledger_kind,
    offload_superseded,
    superseded,
)
from metastore.formats import (
    IndexEntry,
    LedgerInfo,
    ManagedCursorInfo,
    ManagedLedgerInfo,
    OffloadContext,
    OffloadSegment,
    Position,
    SchemaLocator,
)
from offloaders.interface import java_uuid

TOPIC = "persistent://t/ns/orders"
BUCKET = "#pulsar.internal.delayed.bucket_10_20"


def _topic(**kw: object) -> TopicMetadata:
    ml = ManagedLedgerInfo([LedgerInfo(1), LedgerInfo(2, offload_context=OffloadContext(
        uid_msb=5, uid_lsb=6, complete=True, segments=[OffloadSegment(uid_msb=7, uid_lsb=8)])), LedgerInfo(9)])
    cursors = {
        "in-store": ManagedCursorInfo(-1, Position(1, 0), cursor_properties={BUCKET: "44"}),
        "in-ledger": ManagedCursorInfo(55, Position(1, 0)),
        "__compaction": ManagedCursorInfo(-1, Position(1, 0), properties={"CompactedTopicLedger": 77}),
    }
    entries = [IndexEntry(0, Position(90, 0)), IndexEntry(1, Position(91, 0))]
    base = {"managed_ledger": ml, "cursors": cursors, "schema": SchemaLocator(entries[1], entries),
            "schema_id": "t/ns/orders"}
    return TopicMetadata(TOPIC, **{**base, **kw})  # type: ignore[arg-type]


def test_every_kind_of_reference() -> None:
    refs = {(r.ledger_id, r.kind) for r in _topic().references()}
    assert refs == {(1, ReferenceKind.LEDGER), (2, ReferenceKind.LEDGER), (9, ReferenceKind.LEDGER),
                    (55, ReferenceKind.CURSOR), (77, ReferenceKind.COMPACTED), (44, ReferenceKind.DELAYED_BUCKET),
                    (90, ReferenceKind.SCHEMA), (91, ReferenceKind.SCHEMA)}
    assert {r.uuid for r in _topic().offload_references()} == {java_uuid(5, 6), java_uuid(7, 8)}
    assert list(TopicMetadata(TOPIC).references()) == []


def test_a_bucket_property_that_names_no_ledger_hides_references() -> None:
    broken = {"s": ManagedCursorInfo(-1, Position(1, 0), cursor_properties={BUCKET: "forty-four"})}
    with pytest.raises(UnreadableReference, match="not a ledger id"):
        list(_topic(cursors=broken).references())


def test_a_compaction_cursor_kept_in_a_cursor_ledger_hides_its_compacted_ledger() -> None:
    assert _topic().hidden is None
    hidden = _topic(cursors={"__compaction": ManagedCursorInfo(12, Position(1, 0))})
    assert hidden.hidden is not None and "cursor ledger 12" in hidden.hidden


@pytest.mark.parametrize("custom,kind", [
    ({"application": "pulsar", "component": "managed-ledger"}, LedgerKind.DATA),
    ({"application": "pulsar", "component": "managed-ledger", "pulsar/cursor": "s"}, LedgerKind.CURSOR),
    ({"application": "pulsar", "component": "schema"}, LedgerKind.SCHEMA),
    ({"application": "pulsar", "component": "compacted-ledger"}, LedgerKind.COMPACTED),
    ({"application": "pulsar", "component": "delayed-index-bucket"}, LedgerKind.DELAYED_BUCKET),
    ({"application": "kafka", "component": "managed-ledger"}, LedgerKind.OTHER),
    ({"application": "pulsar", "component": "something-new"}, LedgerKind.OTHER),
])
def test_ledger_kind_from_custom_metadata(custom: dict[str, str], kind: LedgerKind) -> None:
    assert ledger_kind(custom) is kind


def test_superseded_only_where_ids_or_absence_prove_it() -> None:
    """Ledger ids only grow, and each owner records its ledgers in id order: an unrecorded ledger
    older than one its owner records can never be recorded; a newer one may be about to be."""
    t = _topic()
    assert superseded(LedgerKind.DATA, 5, t, owner_exists=True) is not None  # below current ledger 9
    assert superseded(LedgerKind.DATA, 10, t, owner_exists=True) is None  # a rollover in flight
    assert superseded(LedgerKind.DATA, 10, TopicMetadata(TOPIC), owner_exists=False) is not None
    assert superseded(LedgerKind.CURSOR, 50, t, cursor="in-ledger", owner_exists=True) is not None
    assert superseded(LedgerKind.CURSOR, 60, t, cursor="in-ledger", owner_exists=True) is None
    assert superseded(LedgerKind.CURSOR, 50, t, cursor="gone", owner_exists=True) is None  # created first
    assert superseded(LedgerKind.SCHEMA, 89, t) is not None
    assert superseded(LedgerKind.SCHEMA, 92, t) is None
    assert superseded(LedgerKind.SCHEMA, 1, TopicMetadata(TOPIC)) is None  # locator written after the ledger
    for kind in (LedgerKind.COMPACTED, LedgerKind.DELAYED_BUCKET, LedgerKind.OTHER):
        assert superseded(kind, 1, t, owner_exists=False) is None  # always wait out the age guard


def test_offload_superseded() -> None:
    t = _topic()
    live = frozenset({java_uuid(5, 6)})
    stale = frozenset({java_uuid(1, 1)})
    assert offload_superseded(2, stale, t, owner_exists=True) is not None  # context names a later offload
    assert offload_superseded(2, live, t, owner_exists=True) is None
    assert offload_superseded(3, stale, t, owner_exists=True) is not None  # trimmed below current ledger 9
    assert offload_superseded(10, stale, t, owner_exists=True) is None
    assert offload_superseded(1, stale, t, owner_exists=True) is None  # listed, no context: may be offloading
    assert offload_superseded(10, stale, TopicMetadata(TOPIC), owner_exists=False) is not None
