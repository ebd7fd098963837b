"""The daemon's Prometheus metrics, named as PIP-186 and the design list them.

One :class:`DeletionMetrics` per registry, so tests (and several services in
one process) never share counters by accident.
"""

from __future__ import annotations

import platform
from collections import Counter as Tally
from collections.abc import Callable, Iterator, Mapping
from importlib import metadata

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from deletion_service.cursor.health import CursorHealth, Status
from deletion_service.protocol.fate import DeleteStatus, HoldReason, Outcome
from deletion_service.protocol.request import LedgerType

PREFIX = "pulsar_ledger_deletion"

#: Seconds from a request's ``markedAt`` to its ledger's deletion: a trim's are seconds, an
#: orphan's or a held retry's can be hours.
SEND_TO_DELETE_BUCKETS = (1, 5, 15, 60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 24 * 3600, 3 * 86400)


class PulsarStyle(Collector):
    """Another collector's families as Pulsar exports its own: every sample labelled with the
    ``cluster`` it belongs to (Pulsar's ``clusterName``), and no ``_created`` twin of a counter or
    histogram (prometheus-client's default, which Pulsar never emits and which doubles the series).

    Applied where metrics leave the process (``/metrics``, the Pushgateway), so no metric can be
    defined without the label; a sample that names its cluster already keeps it."""

    def __init__(self, source: Collector, cluster: str) -> None:
        self.source, self.cluster = source, cluster

    def collect(self) -> Iterator[Metric]:
        for family in self.source.collect():
            out = Metric(family.name, family.documentation, family.type, family.unit)
            created = f"{family.name}_created"
            for sample in family.samples:
                if sample.name == created:
                    continue
                labels = sample.labels if "cluster" in sample.labels else {"cluster": self.cluster, **sample.labels}
                out.add_sample(sample.name, labels, sample.value, sample.timestamp, sample.exemplar)
            yield out


class LateGauge(Collector):
    """A gauge with no sample until its first real reading.

    The backlog gauges come from the broker's own statistics, which an embedded broker refreshes
    every ~10 s and which name a topic only once it is loaded: read earlier, they say 0.  A 0
    exported then would clear the "DLQ not empty" alert exactly when requests are parked, so
    until a reading can be trusted there is no sample at all (Prometheus: "no data")."""

    def __init__(self, name: str, documentation: str, registry: CollectorRegistry) -> None:
        self.name, self.documentation = name, documentation
        self.value: float | None = None
        registry.register(self)

    def set(self, value: float) -> None:
        self.value = value

    def describe(self) -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily(self.name, self.documentation)]

    def collect(self) -> list[GaugeMetricFamily]:
        """Declared (HELP, TYPE) from the start, so scrapers and rule checks know the name; a sample only
        once there is a reading."""
        family = GaugeMetricFamily(self.name, self.documentation)
        if self.value is not None:
            family.add_metric([], self.value)
        return [family]


class HeldGauge(Collector):
    """``held{reason}``: requests this process holds until their retry delay passes, by why they wait.

    Read from the worker when scraped (:meth:`watch`), so it can never lag what ``status`` says; every
    reason is exported, 0 included, from the start (an alert comparing with it needs a sample)."""

    OVERDUE_DOC = ("Held requests whose retry delay ended over a minute ago and are still not taken up: the "
                   "worker is not keeping up, or stuck (0 while it works)")

    def __init__(self, name: str, documentation: str, registry: CollectorRegistry) -> None:
        self.name, self.documentation = name, documentation
        self._source: Callable[[], Mapping[HoldReason, int]] = lambda: {}
        self._overdue: Callable[[], int] = lambda: 0
        registry.register(self)

    def watch(self, source: Callable[[], Mapping[HoldReason, int]], overdue: Callable[[], int]) -> None:
        self._source, self._overdue = source, overdue

    def describe(self) -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily(self.name, self.documentation, labels=["reason"]),
                GaugeMetricFamily(f"{self.name}_overdue", self.OVERDUE_DOC)]

    def collect(self) -> list[GaugeMetricFamily]:
        family = GaugeMetricFamily(self.name, self.documentation, labels=["reason"])
        counts = self._source()
        for reason in HoldReason:
            family.add_metric([reason.value], counts.get(reason, 0))
        return [family, GaugeMetricFamily(f"{self.name}_overdue", self.OVERDUE_DOC, value=self._overdue())]


class CursorHealthGauges(Collector):
    """What ``cursor health`` says of every cursor in scope, as the daemon last read it.

    ``cursors{status}`` counts them all (ok, near, over, cursor-ledger, undecodable); the per-cursor
    ``cursor_state_bytes`` names only the flagged ones (near or over the budget), the largest
    :data:`LABELLED` of them: a healthy cluster of 100,000 topics exports no per-cursor series at all.
    No sample before the first reading (a 0 would say "all cursors fine" before any was read)."""

    LABELLED = 100
    FLAGGED = (Status.NEAR, Status.OVER)

    def __init__(self, registry: CollectorRegistry) -> None:
        self._reading: tuple[list[CursorHealth], int] | None = None  # replaced whole: a scrape sees one reading
        registry.register(self)

    def set(self, cursors: list[CursorHealth], budget: int) -> None:
        self._reading = (cursors, budget)

    def _families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (GaugeMetricFamily(f"{PREFIX}_cursors", "Cursors in scope by their cursor-health status at the last "
                                  "check (near: state at >= 80% of the persist budget)", labels=["status"]),
                GaugeMetricFamily(f"{PREFIX}_cursor_state_bytes", "Persisted ack state of each cursor near or over "
                                  "the budget (the largest 100), as 'cursor health' measures it",
                                  labels=["namespace", "topic", "subscription"]),
                GaugeMetricFamily(f"{PREFIX}_cursor_state_budget_bytes", "The persist budget the cursors are held "
                                  "to: managedLedgerMaxAckStateInBytesToPersist, capped by the store's request limit"))

    def describe(self) -> list[GaugeMetricFamily]:
        return list(self._families())

    def collect(self) -> list[GaugeMetricFamily]:
        counts, sizes, budget = self._families()
        if self._reading is not None:
            cursors, limit = self._reading
            by_status = Tally(c.status for c in cursors)
            for status in Status:
                counts.add_metric([status.value], by_status[status])
            flagged = sorted((c for c in cursors if c.status in self.FLAGGED), key=lambda c: -c.state_bytes)
            for c in flagged[:self.LABELLED]:
                sizes.add_metric([namespace_of(c.topic), c.topic, c.subscription], c.state_bytes)
            budget.add_metric([], limit)
        return [counts, sizes, budget]


# ---- requests waiting that no consumer receives (set by the daemon's backlog gauges: daemon/gauges.py)

class UndeliveredGauge(LateGauge):
    """``undelivered``: requests a broker handed to a consumer that neither acknowledges them nor receives
    anything more (``deletion_service.inflight.undelivered`` states the rule), as this replica last judged;
    no sample before its first reading.  Keeps the last judgement's topics and how long each was quiet, for
    ``/status``."""

    DOC = ("Requests handed by the broker to a consumer of ledger-deletion that has neither acknowledged them nor "
           "been delivered anything for 30 s or more (a consumer of a dead connection pulsar-lite keeps, or a "
           "frozen replica); topics this replica holds requests of are not counted. Alert on min() over replicas")

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(f"{PREFIX}_undelivered", self.DOC, registry)
        self.by_topic: Mapping[str, int] = {}
        self.quiet_s: Mapping[str, float] = {}

    def judged(self, by_topic: Mapping[str, int], quiet_s: Mapping[str, float]) -> None:
        self.by_topic, self.quiet_s = dict(by_topic), dict(quiet_s)
        self.set(sum(by_topic.values()))


def namespace_of(topic: str) -> str:
    """``persistent://t/ns/x`` → ``t/ns`` (a path that names no topic: empty)."""
    parts = topic.partition("://")[2].split("/")
    return "/".join(parts[:2]) if len(parts) >= 3 else ""


def _version() -> str:
    try:
        return metadata.version("ledger-deletion")
    except metadata.PackageNotFoundError:
        return "unknown"


class LeakWatcherGauges:
    """What the leak watcher tells operators: the leaks the brokers left, and whether it keeps up."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.leaks_observed = Counter(
            f"{PREFIX}_leaks_observed", "Ledgers (kind=ledger) and offloaded parts (kind=offloaded) a broker removed "
            "from its metadata but failed to delete from storage: each got one request with reason leaked. Counted "
            "by the replica that watches", ["kind", "tenant", "namespace"], registry=r)
        self.leader = Gauge(f"{PREFIX}_leak_watcher_leader", "1 on the one replica that watches the metadata store "
                            "for leaks, 0 on the others (and when the watcher is off)", registry=r)
        self.last_pass = Gauge(f"{PREFIX}_leak_watcher_last_pass_timestamp_seconds",
                               "When the watcher's last completed pass began reading the metadata store", registry=r)
        self.lag = Gauge(f"{PREFIX}_leak_watcher_lag_seconds", "How far behind the metadata store the watcher is: "
                         "seconds since its last completed pass began reading (0 on a replica that does not watch)",
                         registry=r)
        self.waiting = Gauge(f"{PREFIX}_leak_watcher_waiting", "Ledgers and parts that left every reference and "
                             "wait out the settle delay before their storage is checked", registry=r)


#: The ``kind`` label of a leak, by the request's ledger type.
_LEAK_KIND = {LedgerType.LEDGER: "ledger", LedgerType.OFFLOAD_LEDGER: "offloaded"}


def leak_kind(ledger_type: LedgerType) -> str:
    return _LEAK_KIND[ledger_type]


class DeletionMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.sent = Counter(f"{PREFIX}_sent", "Deletion requests sent to the system topic", ["type"], registry=r)
        self.received = Counter(f"{PREFIX}_received", "Deletion requests received by the delete phase", registry=r)
        self.deleted = Counter(f"{PREFIX}_deleted", "Ledgers (or offloaded copies) deleted", ["type"], registry=r)
        self.failed = Counter(f"{PREFIX}_failed", "Delete attempts that failed", ["type"], registry=r)
        self.acked = Counter(f"{PREFIX}_acked", "Requests acknowledged, by how they ended", ["outcome"], registry=r)
        # Every outcome and ledger type exported at 0 from the start: increase() sees no rise in a series
        # whose first sample is already 1, so the first dead letter after a restart would pass every alert on it.
        for outcome in Outcome:
            self.acked.labels(outcome=outcome.value)
        for ledger_type in LedgerType:
            for by_type in (self.sent, self.deleted, self.failed):
                by_type.labels(type=ledger_type.value)
        self.send_to_delete = Histogram(
            f"{PREFIX}_send_to_delete_seconds", "Time from a request's markedAt to the deletion of its ledger",
            buckets=SEND_TO_DELETE_BUCKETS, registry=r)
        self.max_retry_reached = Counter(
            f"{PREFIX}_max_retry_reached", "Requests sent to the DLQ after twoPhaseDeletionMaxRetryDeleteCount",
            registry=r)
        self.dlq_size = LateGauge(f"{PREFIX}_dlq_size", "Messages waiting in the DLQ subscription", r)
        self.estimated_inflight = LateGauge(
            f"{PREFIX}_estimated_inflight", "Requests in flight: not yet acknowledged on the deletion partitions "
            "plus RETRY, as the broker counts its backlog (what 'inflight' and the admin route say)", r)
        self.unread_requests = LateGauge(
            f"{PREFIX}_request_backlog", "Backlog of the deletion partitions alone: requests not yet settled that "
            "wait for no delay (RETRY's wait on purpose: see held and held_overdue). Topic-wide: every replica "
            "reports the same figure", r)

        self.undelivered = UndeliveredGauge(r)

        self.undisposed = Gauge(
            f"{PREFIX}_undisposed", "Messages decided but not yet acked: their RETRY/DLQ publish or ack keeps "
            "failing (bounded; the consumer stops taking new messages when full)", registry=r)
        self.on_hold = Gauge(
            f"{PREFIX}_on_hold", "Requests held in hand while a dependency is down (no retry is counted for them)",
            registry=r)
        self.ack_lost = Counter(
            f"{PREFIX}_ack_lost", "Redelivered messages this daemon had already settled and acked (the acks were "
            "lost, most likely with a broker that died): acknowledged again, not settled twice", registry=r)
        self.held = HeldGauge(
            f"{PREFIX}_held", "Requests this process holds, unacked, until their retry delay passes, by why they wait "
            "(not-yet: too young or still open; in-use-grace; outage; offload-lane; retry-delay): waiting, not stuck",
            r)
        # process_* (CPU, memory, open files, start time) and the build: which version runs where
        ProcessCollector(registry=r)
        Info(f"{PREFIX}_build", "The running build: package version and Python", registry=r).info(
            {"version": _version(), "python": platform.python_version()})
        self.cursors = CursorHealthGauges(r)  # set by the daemon's periodic cursor check (daemon/gauges.py)
        self.dispose_failures = Counter(
            f"{PREFIX}_dispose_failures", "Failed attempts to publish a RETRY/DLQ copy or to ack", registry=r)
        self.leak_watcher = LeakWatcherGauges(r)  # set by the leak watcher's role (leak_watcher/role.py)

        # Not-yet-due RETRY messages beyond the memory the held set may use (delete_phase/consumer/intake.py).
        self.handed_back = Counter(
            f"{PREFIX}_retry_handed_back", "Not-yet-due RETRY messages republished to RETRY with the delay they had "
            "left, because the held set was full and their RETRY topic had as many set aside as it may: each is a "
            "store write and, on a broker that ignores delivery delays, a receive straight after", registry=r)
        self.asked_back = Counter(
            f"{PREFIX}_retry_asked_back", "Not-yet-due RETRY messages set aside unacked with the broker (the held "
            "set was full) and asked for again, once room was made or the first of them fell due", registry=r)

    def count_delete(self, ledger_type: str, status: DeleteStatus) -> None:
        """One delete's result: ``deleted`` counts as deleted; ``absent`` (already gone) and a
        dry run as neither; anything else as a failed attempt."""
        if status == DeleteStatus.DELETED:
            self.deleted.labels(type=ledger_type).inc()
        elif status not in (DeleteStatus.ABSENT, DeleteStatus.DRY_RUN, DeleteStatus.CLAIMED):
            self.failed.labels(type=ledger_type).inc()

    def count_deletes(self, results: Tally[tuple[str, DeleteStatus]]) -> None:
        """A batch's delete results, ``(ledger type, status) → how many``, as :meth:`count_delete`
        counts each: one increment per label set, not per request (a per-request label lookup and
        locked increment was ~5% of the delete-phase thread in a profile)."""
        for (ledger_type, status), n in results.items():
            if status == DeleteStatus.DELETED:
                self.deleted.labels(type=ledger_type).inc(n)
            elif status not in (DeleteStatus.ABSENT, DeleteStatus.DRY_RUN, DeleteStatus.CLAIMED):
                self.failed.labels(type=ledger_type).inc(n)

    def count_acked(self, outcomes: Tally[Outcome]) -> None:
        """A batch's settled messages, ``outcome → how many``: one increment per outcome."""
        for outcome, n in outcomes.items():
            self.acked.labels(outcome=outcome.value).inc(n)

    def value(self, name: str, labels: dict[str, str] | None = None) -> float:
        """A sample's current value (0 when never set): for tests and the demo's summary."""
        v = self.registry.get_sample_value(name, labels or {})
        return 0.0 if v is None else v
