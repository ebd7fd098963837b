"""The daemon's gauges: requests in flight and the DLQ's size, read from the broker's statistics, and
the cursors' health, read from the metadata store (:class:`CursorHealthWatch`).

A gauge that says 0 while requests are parked is worse than no gauge: an alert
trusts it.  Right after a start the broker's statistics may not yet count what
the last run left (:attr:`BacklogSource.staleness_s`), so nothing is set until
they can be trusted; until that first trusted reading the gauges are tried
every second, then every ``refresh_s``.  A broker that cannot say is logged
once, not on every try.

The DLQ gauge must say what ``dlq list`` says, or ``LedgerDeletionDLQNotEmpty``
fires for requests already requeued or purged.  A real cluster's admin REST
counts precisely (``msgBacklog`` leaves out individually acked messages); the
embedded broker's ``pulsar_subscription_back_log`` counts every message after
the oldest unacked one, acked or not (after ``dlq requeue`` of 1 of 2 parked it
said 3: the other parked one, the requeued one and the settlement marker).  So
on the embedded broker the DLQ gauge counts the parked requests as ``dlq list``
does (:func:`parked_in_dlq`: one read of each DLQ, signed markers applied) — but only a DLQ whose
subscription's figures changed since it was last read, or that was last read :data:`RELIST_EVERY_S`
ago (:class:`ParkedCounts`): a read costs a subscribe and a look, and a refresh comes every 10 s.
Every DLQ is read once, a backlog of 0 too: a tenant may ack its own DLQ's subscription, and the
gauge counts what the listing lists.
The in-flight gauge has the same overcount there and no such cure (a request
topic's acked messages cannot be told from the outside): it counts, besides
the requests not yet settled, those settled behind one still held, until that
one is settled; ``held{reason}`` says how many this process holds.

The same reading gives ``undelivered``: requests a consumer was handed and neither acknowledges nor
follows with anything (:func:`~deletion_service.inflight.undelivered` states the rule), judged
without the topics this replica holds requests of (:func:`held_topics`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from deletion_service.broker.interface import BrokerClient, BrokerError
from deletion_service.broker.subscription_stats import StatsReading, SubscriptionStats
from deletion_service.cursor import health
from deletion_service.cursor.ack_budget import PersistBudget
from deletion_service.delete_phase.consumer.worker import DeletePhaseWorker
from deletion_service.dlq.marker import MarkerKey
from deletion_service.dlq.operations import list_dlq
from deletion_service.inflight import BacklogSource, MetricsBacklog, read_in_flight, undelivered
from deletion_service.metrics import CursorHealthGauges, DeletionMetrics, namespace_of
from deletion_service.protocol.topics import DeletionTopics
from deletion_service.service import LedgerDeletionService
from metastore import MetadataStore
from metastore.interface import MetadataStoreError

_log = logging.getLogger("deletion_service.daemon")  # the daemon's pieces log under one name

#: Counts the requests parked in the DLQs of a scope as ``dlq list`` shows them.
ParkedCount = Callable[[list[DeletionTopics]], int]


def parked_in_dlq(broker: BrokerClient, store: MetadataStore) -> ParkedCount:
    """``dlq list``'s count: every DLQ in scope read once, what signed markers settle left out."""
    return lambda scope: len(list_dlq(broker, scope, MarkerKey.read(store)))


#: A DLQ whose subscription's figures have not changed is read again after this long all the same: what a
#: change the figures do not show (none is known) could cost the gauge is bounded by it.
RELIST_EVERY_S = 300.0


class ParkedCounts:
    """Each DLQ's parked requests as ``dlq list`` counts them, read again only when the broker's figures of
    its DLQ subscription changed (a request parked, purged, requeued; a marker) or :data:`RELIST_EVERY_S`
    passed.  A backlog of 0 proves nothing parked: in namespace scope a tenant may ack its own DLQ's
    subscription, which a listing does not count as settled (only a signed marker settles), so every
    DLQ is read once whatever its backlog, as the listing reads it."""

    def __init__(self, count: ParkedCount, clock: Callable[[], float]) -> None:
        self._count, self._clock = count, clock
        self._last: dict[str, tuple[SubscriptionStats, int, float]] = {}  # DLQ -> figures, parked, read at

    def total(self, served: list[DeletionTopics], reading: StatsReading) -> int:
        now, total = self._clock(), 0
        for topics in served:
            dlq = topics.dlq
            stats = reading.topics.get(dlq)
            last = self._last.get(dlq)
            if (last is not None and stats is not None and reading.counts(dlq) and last[0] == stats
                    and now - last[2] < RELIST_EVERY_S):
                total += last[1]
                continue
            parked = self._count([topics])
            if stats is not None:
                self._last[dlq] = (stats, parked, now)
            total += parked
        return total


#: The topics this process holds requests of (None: every topic, e.g. requests held through an outage).
HeldFrom = Callable[[], "set[str] | None"]


def held_topics(worker: DeletePhaseWorker | None) -> set[str] | None:
    """The topics this worker holds unacknowledged requests of: held until due (in memory, or set aside
    unacked with the broker), in the offload lane (queued, under way or held for a target that does not
    answer, for minutes), waiting for the broker to take their disposition; None (every topic) while it
    holds requests through a dependency outage or has not started (it cannot say what it will receive)."""
    if worker is None or worker.in_hand().paused:
        return None
    try:  # read from the gauges' thread while the worker's thread changes them: a torn read says "every topic"
        held = [*worker.intake.not_yet_due, *worker.disposer.awaiting_next_try]
        aside = worker.intake.not_yet_due.aside.topics()
    except RuntimeError:  # "changed size during iteration": this refresh judges nothing, the next one does
        return None
    lane = worker.offload_lane.topics() if worker.offload_lane is not None else set()
    return {d.message.topic for d in held} | aside | lane


class BacklogGauges:
    """Sets ``estimated_inflight``, ``request_backlog``, ``undelivered`` and ``dlq_size`` from one reading each
    over every topic set served."""

    def __init__(self, metrics: DeletionMetrics, backlog: BacklogSource, served: Callable[[], list[DeletionTopics]],
                 subscriptions: DeletionTopics, refresh_s: float, clock: Callable[[], float],
                 started_at: float, parked: ParkedCount | None = None, held_from: HeldFrom = lambda: set()) -> None:
        self.metrics, self.backlog, self._served, self._subscriptions = metrics, backlog, served, subscriptions
        # the DLQ's count where the broker's backlog would count acked messages
        self.parked = ParkedCounts(parked, clock) if parked is not None else None
        self._held_from = held_from
        self.refresh_s, self._clock, self._started_at = refresh_s, clock, started_at
        self._last_refresh = 0.0
        self._warned = False
        self._read = False

    def refresh_if_due(self) -> None:
        """Until the first trusted reading, every second; then every ``refresh_s``."""
        every = self.refresh_s if self._read else 1.0
        if self._clock() - self._last_refresh >= every:
            self.refresh()

    def refresh(self) -> None:
        """The gauges, once the broker's statistics can be trusted: not before they were refreshed
        after this daemon started (``staleness_s``), or they would say 0 for requests parked."""
        self._last_refresh = self._clock()
        if self._clock() - self._started_at < self.backlog.staleness_s:
            return
        try:
            served = self._served()
            # one reading each for every namespace served (a broker's statistics are one page)
            in_flight = read_in_flight(self.backlog, served)
            self.metrics.estimated_inflight.set(in_flight.total)
            self.metrics.unread_requests.set(in_flight.unread)  # RETRY's wait on purpose: held{reason} says so
            held = self._held_from()
            waiting = undelivered(in_flight.reading, held if held is not None else in_flight.by_topic.keys())
            self.metrics.undelivered.judged(waiting.by_topic, waiting.quiet_s)
            self.metrics.dlq_size.set(self._dlq_size(served))
            self._read = True
        except BrokerError as e:
            if not self._warned:
                _log.warning("cannot refresh backlog gauges: %s", e)
                self._warned = True

    def _dlq_size(self, served: list[DeletionTopics]) -> int:
        """The embedded broker's backlog counts acked messages: there, the parked requests as listed."""
        if self.parked is not None and isinstance(self.backlog, MetricsBacklog):
            return self.parked.total(served, self.backlog.stats([t.dlq for t in served],
                                                                self._subscriptions.dlq_subscription))
        return sum(self.backlog.backlog([t.dlq for t in served], self._subscriptions.dlq_subscription).values())


class CursorHealthWatch:
    """One check of every cursor in scope per :meth:`check`, into :class:`~.metrics.CursorHealthGauges`:
    every ``ledgerDeletionCursorHealthRefreshSeconds`` (300 s; 0 turns it off, and the cursor alert
    cannot fire).

    The cursor alert (``LedgerDeletionCursorAckStateNearBudget``) needs a long-running process that
    sees cursors; ``cursor reset`` and ``cursor health`` run in short CLI processes nobody scrapes.
    It reads what ``cursor health --all`` reads, the same way (nodes listed and read in batches,
    read-only), on its own thread (:mod:`.periodic`), so many cursors never delay a batch.  A
    restricted daemon exports only its own namespaces' cursors.  A store that cannot be read is
    logged once and the last reading stays exported: a cursor near its budget does not look fine
    because ZooKeeper blinked."""

    def __init__(self, store: MetadataStore, budget: PersistBudget, gauges: CursorHealthGauges,
                 in_scope: Callable[[], Callable[[str], bool] | None]) -> None:
        self.store, self.budget, self.gauges = store, budget, gauges
        self._in_scope = in_scope  # asked at each check: the CLI restricts the service after building it
        self._warned = False

    @classmethod
    def for_service(cls, service: LedgerDeletionService) -> CursorHealthWatch:
        return cls(service.store, PersistBudget.from_config(service.config), service.metrics.cursors,
                   lambda: service.restricted_to)

    def check(self) -> None:
        try:
            cursors = health.check(self.store, self.budget)
        except MetadataStoreError as e:
            if not self._warned:
                _log.warning("cannot read the cursors for the cursor-health gauges (the last reading stays): %s", e)
                self._warned = True
            return
        self._warned = False
        allowed = self._in_scope()
        if allowed is not None:
            cursors = [c for c in cursors if allowed(namespace_of(c.topic))]
        self.gauges.set(cursors, health.effective_budget(self.budget, self.store))
