"""The DLQ gauge reads a DLQ again only when the broker's figures of its subscription changed (or after a
while), and counts what ``dlq list`` lists, whatever the subscription's backlog says."""

from __future__ import annotations

from deletion_service.broker.subscription_stats import StatsReading, SubscriptionStats
from deletion_service.config import DeletionConfig
from deletion_service.daemon.gauges import RELIST_EVERY_S, ParkedCounts
from deletion_service.protocol.topics import DeletionTopics

A, B = (DeletionTopics.for_namespace(ns, DeletionConfig()) for ns in ("t1/ns", "t2/ns"))


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def _counts(parked: dict[str, int], clock: Clock) -> tuple[ParkedCounts, list[str]]:
    read: list[str] = []

    def count(scope: list[DeletionTopics]) -> int:
        read.extend(t.dlq for t in scope)
        return sum(parked[t.dlq] for t in scope)

    return ParkedCounts(count, clock), read


def _reading(figures: dict[str, SubscriptionStats], counted: set[str] | None = None) -> StatsReading:
    return StatsReading(figures, 0.0, frozenset(figures if counted is None else counted))


def test_a_dlq_is_read_again_only_when_its_figures_change_or_after_a_while() -> None:
    clock = Clock()
    parked = {A.dlq: 3, B.dlq: 0}
    counts, read = _counts(parked, clock)
    figures = {A.dlq: SubscriptionStats(4, 0, 10.0), B.dlq: SubscriptionStats(0, 0, None)}
    assert counts.total([A, B], _reading(figures)) == 3
    assert read == [A.dlq, B.dlq]  # each read once, a backlog of 0 too
    for _ in range(5):
        clock.now += 10
        assert counts.total([A, B], _reading(figures)) == 3
    assert read == [A.dlq, B.dlq]  # unchanged figures: the counts stand
    parked[A.dlq] = 2  # a purge: its ack moves the subscription's figures
    figures[A.dlq] = SubscriptionStats(4, 0, 70.0)
    assert counts.total([A, B], _reading(figures)) == 2 and read == [A.dlq, B.dlq, A.dlq]
    clock.now += RELIST_EVERY_S
    assert counts.total([A, B], _reading(figures)) == 2 and read == [A.dlq, B.dlq, A.dlq, A.dlq, B.dlq]


def test_a_dlq_whose_subscription_a_tenant_acked_still_counts_what_the_listing_lists() -> None:
    """A tenant acks its own DLQ's subscription: the backlog reads 0, but nothing a signed marker settles
    left the listing, and the gauge counts what the listing lists."""
    clock = Clock()
    counts, read = _counts({A.dlq: 5}, clock)
    assert counts.total([A], _reading({A.dlq: SubscriptionStats(5, 0, 10.0)})) == 5
    assert counts.total([A], _reading({A.dlq: SubscriptionStats(0, 0, 20.0)})) == 5
    assert read == [A.dlq, A.dlq]


def test_a_dlq_the_broker_has_not_counted_yet_is_read_every_time() -> None:
    """A topic pulsar-lite just loaded shows zeros until its next refresh: those zeros are no count."""
    clock = Clock()
    counts, read = _counts({A.dlq: 2}, clock)
    zeros = {A.dlq: SubscriptionStats(0, 0, None)}
    assert counts.total([A], _reading(zeros, counted=set())) == 2
    assert counts.total([A], _reading(zeros, counted=set())) == 2
    assert read == [A.dlq, A.dlq]
