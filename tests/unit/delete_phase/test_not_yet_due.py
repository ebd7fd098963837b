"""The held set: due messages out first, the one due last found and removed without a scan, and a
full memory that sets the latest aside with the broker instead of republishing it.

The intake tests drive :class:`Intake` with an in-process consumer on purpose: they count exactly what
reaches the broker (publishes, acks, requests for redelivery) pass by pass.  The same behaviour on a
real broker and daemon is ``tests/system/tenancy/test_held_flood_costs_other_tenants_nothing.py``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from deletion_service.broker.interface import BrokerError, Consumer, Outgoing, Received
from deletion_service.broker.publisher import CopyPublisher
from deletion_service.delete_phase.consumer.ack_tally import AckTally
from deletion_service.delete_phase.consumer.copies import DELAY_TIME
from deletion_service.delete_phase.consumer.intake import Intake, Limits
from deletion_service.delete_phase.consumer.not_yet_due import NotYetDue
from deletion_service.delete_phase.consumer.settled_recently import SettledRecently
from deletion_service.delete_phase.rules.decision import Kind, Policy
from deletion_service.delete_phase.rules.hold_reason import HoldSeal
from deletion_service.delete_phase.rules.lifecycle import Event, MessageInHand, Stage
from deletion_service.metrics import DeletionMetrics
from deletion_service.protocol.fate import HoldReason

RETRY = "persistent://t0/ns/__ledger_deletion-RETRY"
_ids = itertools.count()


class CountedDue(int):
    """A due time that counts how often it is compared: the cost of a heap operation, without a clock."""

    compared = 0

    def __lt__(self, other: object) -> bool:
        CountedDue.compared += 1
        return int(self) < int(other)  # type: ignore[arg-type]

    def __gt__(self, other: object) -> bool:
        CountedDue.compared += 1
        return int(self) > int(other)  # type: ignore[arg-type]

    def __neg__(self) -> CountedDue:
        return CountedDue(-int(self))


def held(due: int, topic: str = RETRY, properties: dict[str, str] | None = None) -> MessageInHand:
    d = MessageInHand(Received(b"{}", properties or {}, topic, f"1:{next(_ids)}:-1:-1", 0), consumer=None)  # type: ignore[arg-type]
    d.due_ms = due
    d.advance(Event.HOLD_UNTIL_DUE)
    return d


def test_due_messages_leave_soonest_first_and_equals_in_arrival_order() -> None:
    s = NotYetDue()
    items = [held(due) for due in (50, 10, 30, 10, 20)]
    for d in items:
        s.add(d)
    assert s.pop_due(now_ms=30, limit=3) == [items[1], items[3], items[4]]
    assert s.pop_due(now_ms=30, limit=10) == [items[2]]
    assert s.pop_due(now_ms=30, limit=10) == []
    assert list(s) == [items[0]] and len(s) == 1 and s.until_ms() == 50


def test_the_one_due_last_is_found_and_removed_and_the_next_latest_takes_its_place() -> None:
    s = NotYetDue()
    items = [held(due) for due in (10, 40, 40, 20)]
    for d in items:
        s.add(d)
    assert s.latest() is items[2], "of two due last, the newest goes first"
    s.remove(items[2])
    assert s.latest() is items[1]
    s.remove(items[1])
    assert s.latest() is items[3] and s.until_ms() == 20
    assert not s.holds(items[1].message) and s.holds(items[0].message)
    assert s.pop_due(now_ms=100, limit=10) == [items[0], items[3]], "removed ones never come out"


def test_finding_and_removing_the_one_due_last_costs_log_n_comparisons_not_n() -> None:
    """What a full set does on every arrival of a flood: find the latest and remove it.  Counted in
    comparisons: a scan of 20,000 would be 20,000 per eviction."""
    per_eviction = {}
    for n in (1_000, 20_000):
        s = NotYetDue()
        for i in range(n):
            s.add(held(CountedDue(i * 7 % n)))
        CountedDue.compared = 0
        evictions = 2_000
        for i in range(evictions):
            s.add(held(CountedDue(n + i)))
            s.remove(s.latest())
        per_eviction[n] = CountedDue.compared / evictions
        assert len(s) == n
    assert per_eviction[20_000] < 6 * math.log2(20_000), per_eviction
    assert per_eviction[20_000] < 3 * per_eviction[1_000], "grows with log n, not with n"


def test_removed_entries_do_not_pile_up_in_the_heaps() -> None:
    s = NotYetDue()
    for i in range(10_000):
        s.add(held(i))
        if len(s) > 100:
            s.remove(s.latest())
    assert len(s) == 100
    assert len(s._soonest) <= 2 * 100 + 64 and len(s._latest) <= 2 * 100 + 64  # noqa: SLF001 - the bound itself


def test_a_message_set_aside_is_counted_as_held_by_its_sealed_reason_until_it_returns() -> None:
    seal = HoldSeal(b"k" * 32)
    s = NotYetDue(seal)
    label = seal.label(HoldReason.NOT_YET, "ledger younger than minLedgerAgeSeconds (3600s)", b"{}")
    soon, late = held(10, properties=label), held(90, properties=label)
    forged = held(70, properties={"ledgerDeletionHeldFor": "outage", "ledgerDeletionHeldWhy": "run purge now"})
    for d in (soon, late, forged):
        s.add(d)
    s.set_aside(late)
    s.set_aside(forged)
    assert (len(s), s.held_total(), len(s.aside), s.aside.count(RETRY)) == (1, 3, 2, 2)
    assert s.by_reason()[HoldReason.NOT_YET] == 2 and s.by_reason()[HoldReason.UNKNOWN] == 1
    assert s.by_reason()[HoldReason.OUTAGE] == 0, "a label without our seal buys no reason"
    assert s.aside.soonest_ms() == 70 and s.until_ms() == 90
    assert s.overdue(before_ms=80) == 2
    groups = {g.reason: g for g in s.groups()}
    assert groups[HoldReason.NOT_YET].count == 2 and groups[HoldReason.NOT_YET].last_due_ms == 90
    assert groups[HoldReason.UNKNOWN].example == "", "a forged label's words are not shown"
    s.aside.returned((RETRY, forged.message.message_id))  # delivered again (a reconnect): no longer aside
    assert (len(s.aside), s.aside.soonest_ms(), s.by_reason()[HoldReason.UNKNOWN]) == (1, 90, 0)
    s.aside.clear()  # every one asked for again
    assert (s.held_total(), len(s.aside), s.aside.soonest_ms(), s.until_ms()) == (1, 0, None, 10)


# ---- the intake: what a full memory does with the message due last


@dataclass
class RedeliveringConsumer(Consumer):
    """Delivers its queue; ``redeliver_unacked`` puts every delivered, unacked message back in it, as the
    broker does for ``CommandRedeliverUnacknowledgedMessages``."""

    queue: list[Received] = field(default_factory=list)
    unacked: dict[str, Received] = field(default_factory=dict)
    acked: list[str] = field(default_factory=list)
    redeliveries: int = 0
    can_redeliver: bool = True

    def receive(self, timeout_s: float) -> Received | None:
        if not self.queue:
            return None
        m = self.queue.pop(0)
        self.unacked[m.message_id] = m
        return m

    def ack(self, message: Received) -> None:
        self.unacked.pop(message.message_id, None)
        self.acked.append(message.message_id)

    def close(self) -> None:
        pass

    @property
    def redelivers_on_request(self) -> bool:
        return self.can_redeliver

    def redeliver_unacked(self) -> None:
        self.redeliveries += 1
        self.queue.extend(self.unacked.values())
        self.unacked.clear()


@dataclass
class CountingPublisher(CopyPublisher):
    handed_back: list[str] = field(default_factory=list)

    def send_retry(self, data: bytes, properties: dict[str, str], delay_s: float,
                   source_topic: str | None = None) -> str:
        self.handed_back.append(properties["ORIGIN_MESSAGE_ID"])
        return f"retry-{len(self.handed_back)}"

    def send_dlq(self, data: bytes, properties: dict[str, str], source_topic: str | None = None) -> str:
        raise BrokerError("not in this test")

    def send_retries(self, copies: Sequence[Outgoing]) -> list[str | BrokerError]:
        return [self.send_retry(c.data, c.properties, c.deliver_after_s) for c in copies]

    def send_dead_letters(self, copies: Sequence[Outgoing]) -> list[str | BrokerError]:
        raise BrokerError("not in this test")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def intake(retries: RedeliveringConsumer, clock: Clock, cap: int, per_topic: int = 40_000
           ) -> tuple[Intake, CountingPublisher]:
    publisher = CountingPublisher()
    i = Intake(RedeliveringConsumer(), retries, publisher, Policy(min_ledger_age_s=3600), DeletionMetrics(),
               Limits(batch_size=20, max_not_yet_due=cap, max_set_aside_per_topic=per_topic), SettledRecently(),
               AckTally(), clock)
    return i, publisher


def young(clock: Clock, delay_s: int, topic: str = RETRY) -> Received:
    return Received(b"{}", {DELAY_TIME: str(delay_s * 1000)}, topic, f"2:{next(_ids)}:-1:-1",
                    int(clock.now * 1000))


def drain(i: Intake, passes: int = 100) -> list[MessageInHand]:
    out: list[MessageInHand] = []
    for _ in range(passes):
        out += i.collect(0.0, 20)
    return out


def test_a_full_memory_sets_the_latest_aside_unacked_and_republishes_nothing() -> None:
    clock, retries = Clock(), RedeliveringConsumer()
    i, publisher = intake(retries, clock, cap=10)
    retries.queue = [young(clock, 100 + n) for n in range(60)]
    assert drain(i) == []
    held = i.not_yet_due
    assert (len(held), len(held.aside), held.held_total()) == (10, 50, 60)
    assert sorted(d.due_ms for d in held) == [int(clock.now * 1000) + (100 + n) * 1000 for n in range(10)], \
        "memory keeps the soonest due"
    assert publisher.handed_back == [] and retries.acked == [], "nothing circles RETRY"
    assert retries.redeliveries == 0 and len(retries.unacked) == 60, "the broker keeps them, unacked"
    assert drain(i) == [] and retries.redeliveries == 0, "while nothing falls due, nothing is asked for again"


def test_set_aside_messages_are_asked_back_when_room_is_made_and_none_is_lost_or_decided_twice() -> None:
    clock, retries = Clock(), RedeliveringConsumer()
    i, _ = intake(retries, clock, cap=10)
    retries.queue = [young(clock, 100 + n) for n in range(60)]
    drain(i)
    clock.now += 105.5  # the 6 soonest fall due: the memory is at most half full after they leave
    due = drain(i, passes=1)
    assert len(due) == 6 and retries.redeliveries == 0, "asked back at the next pass, not this one"
    i._next_ask_back = 0  # noqa: SLF001 - not waiting out ASK_BACK_EVERY_S in a unit test
    assert drain(i) == [] and retries.redeliveries == 1
    assert (len(i.not_yet_due), len(i.not_yet_due.aside)) == (10, 44), \
        "the 6 in hand came back too and were left to the ones in hand"
    for d in due:  # settled: acked
        d.decide(decision_ack())
        d.advance(Event.RECORD)
        retries.ack(d.message)
        d.advance(Event.ACK)
    seen = {d.message.message_id for d in due}
    clock.now += 60  # everything falls due
    for _ in range(10):
        i._next_ask_back = 0  # noqa: SLF001
        for d in drain(i, passes=5):
            assert d.message.message_id not in seen, "decided twice"
            seen.add(d.message.message_id)
            retries.ack(d.message)
    assert len(seen) == 60 and i.not_yet_due.held_total() == 0


def test_a_topic_at_its_set_aside_limit_hands_back_the_latest_instead() -> None:
    clock, retries = Clock(), RedeliveringConsumer()
    i, publisher = intake(retries, clock, cap=5, per_topic=10)
    other = "persistent://t1/ns/__ledger_deletion-RETRY"
    retries.queue = [young(clock, 100 + n) for n in range(20)] + [young(clock, 50, other)]
    drain(i, passes=3)
    held = i.not_yet_due
    assert held.aside.count(RETRY) == 10 and held.aside.count(other) == 0
    assert len(publisher.handed_back) == 6, "the 5 beyond the limit, and the one the other topic's request displaced"
    assert i.metrics.value("pulsar_ledger_deletion_retry_handed_back_total") == 6
    assert any(d.message.topic == other for d in held), "another topic's sooner request is held in memory"


def test_a_consumer_that_cannot_ask_for_redelivery_hands_the_latest_back() -> None:
    clock, retries = Clock(), RedeliveringConsumer(can_redeliver=False)
    i, publisher = intake(retries, clock, cap=5)
    retries.queue = [young(clock, 100 + n) for n in range(8)]
    drain(i, passes=3)
    assert (len(i.not_yet_due), len(i.not_yet_due.aside), len(publisher.handed_back)) == (5, 0, 3)
    assert all(d.stage == Stage.NOT_YET_DUE for d in i.not_yet_due)


def decision_ack():  # noqa: ANN201 - a verdict that only acks
    from deletion_service.delete_phase.rules.decision import Action, Verdict
    return Action(Verdict.ACK_ABSENT, "absent", kind=Kind.NONE)


def test_topics_with_messages_set_aside_or_in_the_offload_lane_count_as_held_for_the_undelivered_rule() -> None:
    """Set-aside messages are unacknowledged with the broker and quiet on purpose: their RETRY topic is one
    this process holds requests of, or ``undelivered`` would call a held flood stranded."""
    from types import SimpleNamespace

    from deletion_service.daemon.gauges import held_topics

    other = "persistent://t1/ns/__ledger_deletion-RETRY"
    s = NotYetDue()
    s.add(held(10, other))
    s.set_aside(held(99))
    worker = SimpleNamespace(in_hand=lambda: SimpleNamespace(paused=0), intake=SimpleNamespace(not_yet_due=s),
                             disposer=SimpleNamespace(awaiting_next_try=[]), offload_lane=None)
    assert held_topics(worker) == {other, RETRY}  # type: ignore[arg-type]
    # and a topic whose requests wait in the offload lane (a slow or down target holds them for minutes)
    lane_topic = "persistent://t2/ns/__ledger_deletion-partition-0"
    worker.offload_lane = SimpleNamespace(topics=lambda: {lane_topic})
    assert held_topics(worker) == {other, RETRY, lane_topic}  # type: ignore[arg-type]
