"""``--exit-when-idle`` knows it is idle from what it acknowledged, not only from a stale backlog.

The embedded broker refreshes its backlog figures every ~10 s; after a drain
they still count messages the worker has since acknowledged.  A stale reading
cannot be produced on demand by the real broker, so :class:`FrozenBacklog`
injects one: the real ``/metrics`` reading taken *before* the drain, served
afterwards (the fault), next to the real reading that must agree in the end.
"""

from __future__ import annotations

from collections.abc import Iterable

from deletion_service.cluster_writer import pulsar_custom_metadata
from deletion_service.daemon.run import QUIET_S, Daemon
from deletion_service.delete_phase.consumer.ack_tally import AckTally
from deletion_service.inflight import BacklogSource, MetricsBacklog
from metastore import open_store
from tests.support.deletion_world import make_world, request
from tests.support.harness import PulsarLiteBroker, wait_until

TOPIC = "persistent://idle/ns/orders"


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_tally_counts_whole_seconds_inside_the_bound_only() -> None:
    clock = Clock(1000.0)
    tally = AckTally(horizon_s=30, clock=clock)
    for _ in range(3):
        tally.record("t")
    clock.now = 1005.5
    tally.record("t")
    tally.record("u")
    assert tally.since("t", 10) == 4
    assert tally.since("t", 5) == 1  # the bucket of second 1000 began 5.5 s ago
    assert tally.explains({"t": 4, "u": 2, "v": 0}, staleness_s=10) == {"u": 2}
    assert tally.explains({"t": 5}, staleness_s=10) == {"t": 5}, "more than we acked is not explained"
    assert tally.explains({"t": 1}, staleness_s=0) == {"t": 1}, "a fresh source is taken at its word"
    clock.now = 1040
    tally.record("t")
    assert tally.since("t", 100) == 1, "buckets older than the horizon are dropped"


class FrozenBacklog(BacklogSource):
    """Serves one earlier reading of the real broker's metrics (the injected staleness)."""

    staleness_s = 15.0

    def __init__(self, reading: dict[str, int]) -> None:
        self.reading = reading

    def backlog(self, topics: Iterable[str], subscription: str) -> dict[str, int]:
        return {t: self.reading.get(t, 0) for t in topics}


def test_a_stale_backlog_of_what_we_acked_does_not_hold_exit_when_idle(
    zk_url: str, pulsar_broker: PulsarLiteBroker
) -> None:
    with open_store(zk_url) as store:
        world = make_world(store, store, pulsar_broker.service_url)
        service = world.service
        ids = range(1, 41)
        paths = [world.writer.bk_ledger(lid, pulsar_custom_metadata(TOPIC)) for lid in ids]
        world.writer.managed_ledger(TOPIC, [100])
        service.publisher.prepare(*service.topics.consumed)
        for lid in ids:
            service.send_pending_delete(request(TOPIC, lid))
        metrics = MetricsBacklog(pulsar_broker.metrics_url)
        consumed, sub = service.topics.consumed, service.topics.subscription
        wait_until(lambda: sum(metrics.backlog(consumed, sub).values()) == len(ids), 30, "the broker to count them")
        before = metrics.backlog(consumed, sub)

        daemon = Daemon(service, FrozenBacklog(before), metrics_refresh_s=3600)
        daemon.start()
        try:
            wait_until(lambda: all(store.get(p) is None for p in paths), 60, "the drain")
            assert daemon.wait(exit_when_idle=True, max_wait_s=QUIET_S + 10, poll_s=0.2) == 0, \
                daemon.idle_state().why_not
            # What the stale reading counted really was acknowledged: the broker agrees once it refreshes.
            wait_until(lambda: sum(metrics.backlog(consumed, sub).values()) == 0, 40, "the real backlog to reach 0")

            # A stale figure larger than what we acknowledged is not explained away.
            daemon.backlog = FrozenBacklog({t: n + 1 for t, n in before.items() if n} or {consumed[0]: 1})
            state = daemon.idle_state()
            assert not state.idle and "backlog" in state.why_not
        finally:
            daemon.stop()
            service.broker.close()
