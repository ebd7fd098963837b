"""The leak watcher's pure core: what left every reference between two readings, the requests a
leak of it needs, and the settle delay (no servers)."""

from __future__ import annotations

from deletion_service.leak_watcher.departures import Departure, departures, part_of
from deletion_service.leak_watcher.settle import SettleQueue
from deletion_service.leak_watcher.sightings import Reading, reading_of
from deletion_service.mark_phase.pick import OffloadLocation
from deletion_service.protocol.references import TopicMetadata
from deletion_service.protocol.request import LedgerComponent, LedgerType, Reason
from metastore.formats import (
    IndexEntry,
    LedgerInfo,
    ManagedCursorInfo,
    ManagedLedgerInfo,
    OffloadContext,
    Position,
    SchemaLocator,
)
from offloaders.interface import java_uuid

TOPIC = "persistent://t/ns/orders"
OTHER = "persistent://t/ns/other"
S3 = {"bucket": "offload", "region": "us-east-1"}
BUCKET = "#pulsar.internal.delayed.bucket_10_20"


def _offloaded(ledger_id: int, msb: int, *, bk_deleted: bool = False) -> LedgerInfo:
    return LedgerInfo(ledger_id, offload_context=OffloadContext(
        uid_msb=msb, uid_lsb=1, complete=True, bookkeeper_deleted=bk_deleted, driver_name="aws-s3",
        driver_metadata=S3))


def _topic(ledgers: list[LedgerInfo], cursors: dict | None = None, schema: list[int] | None = None,
           topic: str = TOPIC) -> TopicMetadata:
    locator = None
    if schema:
        entries = [IndexEntry(i, Position(lid, 0)) for i, lid in enumerate(schema)]
        locator = SchemaLocator(entries[-1], entries)
    return TopicMetadata(topic, ManagedLedgerInfo(ledgers), cursors or {}, locator, "t/ns/orders" if schema else None)


def _requests(found: list[Departure]) -> set[tuple[str, int, str, str | None]]:
    return {(str(r.ledger_type), r.ledger_id, str(r.ledger_component), (part_of(r) or (0, None))[1])
            for d in found for r in d.requests}


def test_a_ledger_that_leaves_the_list_departs_with_a_leaked_request() -> None:
    before = reading_of([_topic([LedgerInfo(1), LedgerInfo(2), LedgerInfo(3)])])
    after = reading_of([_topic([LedgerInfo(2), LedgerInfo(3)])])
    found = departures(before, after, marked_at_ms=5)
    assert _requests(found) == {("LEDGER", 1, "MANAGED_LEDGER", None)}
    request = found[0].requests[0]
    assert (request.reason, request.topic_name, request.marked_at) == (Reason.LEAKED, TOPIC, 5)
    assert departures(after, after, 5) == []  # nothing left: nothing departs


def test_a_ledger_another_topic_still_references_does_not_depart() -> None:
    """Ids are global: a ledger that left one topic but is named elsewhere is referenced."""
    before = reading_of([_topic([LedgerInfo(1), LedgerInfo(2)]), _topic([LedgerInfo(9)], topic=OTHER)])
    after = reading_of([_topic([LedgerInfo(2)]),
                        _topic([LedgerInfo(9)], topic=OTHER, cursors={"c": ManagedCursorInfo(1, Position(9, 0))})])
    assert departures(before, after, 5) == []


def test_a_topics_managed_ledger_and_schema_read_apart_are_one_topic() -> None:
    """The metadata store keeps a topic's schema apart from its managed ledger: both are its references."""
    ledgers, schema = _topic([LedgerInfo(1)]), TopicMetadata(TOPIC, schema=_topic([], schema=[90]).schema,
                                                              schema_id="t/ns/orders")
    reading = reading_of([ledgers, schema])
    assert reading.topics[TOPIC].ledger_ids() == {1, 90}
    assert departures(reading, reading_of([schema, ledgers]), 5) == []
    assert _requests(departures(reading, reading_of([ledgers]), 5)) == {("LEDGER", 90, "SCHEMA_STORAGE", None)}


def test_a_topic_that_could_not_be_read_departs_nothing() -> None:
    before = reading_of([_topic([LedgerInfo(1), LedgerInfo(2)])])
    after = Reading({}, frozenset({TOPIC}))  # the second reading failed for this topic
    assert departures(before, after, 5) == []
    broken = {"s": ManagedCursorInfo(-1, Position(1, 0), cursor_properties={BUCKET: "forty-four"})}
    unreadable = reading_of([_topic([], cursors=broken)])
    assert unreadable.unreadable == frozenset({TOPIC})
    assert departures(before, unreadable, 5) == []


def test_a_namespace_that_could_not_be_read_departs_nothing_and_holds_back_what_waits() -> None:
    before = reading_of([_topic([LedgerInfo(1), LedgerInfo(2)]), _topic([LedgerInfo(9)], topic=OTHER)])
    after = reading_of([], unreadable_namespaces=["t/ns"])  # listing t/ns failed this pass
    assert departures(before, after, 5) == []
    queue = SettleQueue(settle_s=0)
    queue.add(departures(before, reading_of([]), 5), now=0)
    # unknown again: nothing may be requested, and nothing forgotten (its sightings carried over lack them)
    assert len(queue) == 3 and queue.drop_referenced(after) == 0
    assert queue.due(now=0, readable=after.knows) == [] and len(queue) == 3
    assert sorted(r.ledger_id for r in queue.due(now=0, readable=reading_of([]).knows)) == [1, 2, 9]


def test_a_deleted_topic_departs_every_kind_it_referenced() -> None:
    cursors = {"in-ledger": ManagedCursorInfo(55, Position(1, 0)),
               "delayed": ManagedCursorInfo(-1, Position(1, 0), cursor_properties={BUCKET: "44"}),
               "__compaction": ManagedCursorInfo(-1, Position(1, 0), properties={"CompactedTopicLedger": 77})}
    before = reading_of([_topic([LedgerInfo(1), _offloaded(2, 9)], cursors, schema=[90])])
    found = departures(before, reading_of([]), 5)
    assert _requests(found) == {
        ("LEDGER", 1, "MANAGED_LEDGER", None), ("LEDGER", 2, "MANAGED_LEDGER", None),
        ("OFFLOAD_LEDGER", 2, "MANAGED_LEDGER", java_uuid(9, 1)),
        ("LEDGER", 55, "MANAGED_CURSOR", None), ("LEDGER", 44, "DELAYED_INDEX_BUCKET", None),
        ("LEDGER", 77, "COMPACTED_LEDGER", None), ("LEDGER", 90, "SCHEMA_STORAGE", None)}
    by_id = {r.ledger_id: r for d in found for r in d.requests if r.ledger_type == LedgerType.LEDGER}
    assert (by_id[55].cursor_name, by_id[44].cursor_name, by_id[90].schema_id) == ("in-ledger", "delayed",
                                                                                   "t/ns/orders")
    assert by_id[77].ledger_component == LedgerComponent.COMPACTED_LEDGER


def test_a_bookkeeper_copy_deleted_after_offload_gets_no_bookkeeper_request() -> None:
    before = reading_of([_topic([_offloaded(2, 9, bk_deleted=True), LedgerInfo(3)])])
    found = departures(before, reading_of([_topic([LedgerInfo(3)])]), 5)
    assert _requests(found) == {("OFFLOAD_LEDGER", 2, "MANAGED_LEDGER", java_uuid(9, 1))}


def test_a_replaced_offload_departs_only_the_old_part() -> None:
    """A re-offload names a new uuid: the old objects departed, the ledger and its new copy did not."""
    before = reading_of([_topic([_offloaded(2, 9), LedgerInfo(3)])])
    after = reading_of([_topic([_offloaded(2, 11), LedgerInfo(3)])])
    assert _requests(departures(before, after, 5)) == {("OFFLOAD_LEDGER", 2, "MANAGED_LEDGER", java_uuid(9, 1))}


def test_a_part_that_cannot_be_located_is_reported_not_requested() -> None:
    nowhere = LedgerInfo(2, offload_context=OffloadContext(uid_msb=9, uid_lsb=1, complete=True))  # no driver
    before = reading_of([_topic([nowhere, LedgerInfo(3)])])
    found = departures(before, reading_of([_topic([LedgerInfo(3)])]), 5)
    assert [(d.ledger_id, d.requests, bool(d.unrequestable)) for d in found] == [(2, (), True)]
    located = departures(before, reading_of([_topic([LedgerInfo(3)])]), 5,
                         offload_fallback=OffloadLocation("aws-s3", S3))
    assert _requests(located) == {("LEDGER", 2, "MANAGED_LEDGER", None),
                                  ("OFFLOAD_LEDGER", 2, "MANAGED_LEDGER", java_uuid(9, 1))}


def test_settle_hands_out_once_after_the_delay_and_forgets_what_is_referenced_again() -> None:
    before = reading_of([_topic([LedgerInfo(1), LedgerInfo(2), LedgerInfo(3)])])
    after = reading_of([_topic([LedgerInfo(3)])])
    queue = SettleQueue(settle_s=120)
    queue.add(departures(before, after, 5), now=1000)
    queue.add(departures(before, after, 5), now=1050)  # seen departing again: the delay runs from 1000
    assert len(queue) == 2 and queue.due(1119) == []
    relisted = reading_of([_topic([LedgerInfo(2), LedgerInfo(3)])])  # ledger 2 is back (a reading had lagged)
    assert queue.drop_referenced(relisted) == 1
    assert [r.ledger_id for r in queue.due(1120)] == [1]
    assert queue.due(5000) == [] and len(queue) == 0


def test_a_departure_no_request_can_name_gets_none_and_the_others_theirs() -> None:
    """A tenant's topic named with a control character, or a subscription name over the model's limit:
    that departure is unrequestable (said, and the scan's), never an error that stops every pass."""
    evil = "persistent://evil/ns/a\tb"
    long_sub = "s" * 1100
    before = reading_of([_topic([LedgerInfo(3)], topic=evil),
                         _topic([LedgerInfo(1)], {long_sub: ManagedCursorInfo(56, Position(1, 0))}),
                         _topic([LedgerInfo(7)], topic=OTHER)])
    after = reading_of([_topic([], topic=evil), _topic([]), _topic([], topic=OTHER)])
    found = departures(before, after, 5)
    assert _requests(found) == {("LEDGER", 1, "MANAGED_LEDGER", None), ("LEDGER", 7, "MANAGED_LEDGER", None)}
    refused = {d.ledger_id: d.unrequestable for d in found if not d.requests}
    assert set(refused) == {3, 56} and all("no valid request can name it" in (why or "") for why in refused.values())
