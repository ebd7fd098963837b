"""The leak watcher as a daemon role (embedded SQLite store): passes only while holding the role, a
successor resumes from what the holder kept, and a leak made during the hand-over is still caught.

Who holds the role is decided here by a switch (:class:`Switch`), standing in for the election so
that a hand-over can happen at an exact point; the election itself runs against real ZooKeeper in
``tests/integration/metastore/test_zookeeper_leadership.py``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from deletion_service import failpoints
from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from deletion_service.leak_watcher import persisted
from deletion_service.leak_watcher.role import WatcherRole
from deletion_service.leak_watcher.storage import still_stored
from deletion_service.metrics import DeletionMetrics
from deletion_service.protocol.request import PendingDeleteLedgerInfo
from metastore import open_store
from metastore.formats import ledger_path
from metastore.interface import Leadership, MetadataStore
from offloaders.registry import OffloaderSettings

TOPIC = "persistent://t/ns/orders"
SETTLE_S = 100.0


class Switch(Leadership):
    def __init__(self, name: str, on: bool) -> None:
        self.name, self.on = name, on

    def holds(self) -> bool:
        return self.on

    def holder(self) -> str | None:
        return self.name if self.on else None

    def close(self) -> None:
        self.on = False


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


class Broker:
    """What the role sends; ``refuse`` requests are answered unsent."""

    def __init__(self) -> None:
        self.sent: list[PendingDeleteLedgerInfo] = []
        self.refuse = False

    def send(self, requests: Sequence[PendingDeleteLedgerInfo]) -> Sequence[PendingDeleteLedgerInfo]:
        if self.refuse:
            return requests
        self.sent.extend(requests)
        return []


def _role(store: MetadataStore, leadership: Leadership, broker: Broker, clock: Clock,
          metrics: DeletionMetrics | None = None) -> WatcherRole:
    check = still_stored(store, "/ledgers", "hierarchical", OffloaderSettings())
    gauges = (metrics or DeletionMetrics(CollectorRegistry())).leak_watcher
    return WatcherRole(store, leadership, check, broker.send, gauges, SETTLE_S, clock=clock)


def _seed(store: MetadataStore, ledgers: list[int]) -> ClusterWriter:
    w = ClusterWriter(store)
    w.ensure_layout()
    for lid in ledgers:
        w.bk_ledger(lid, pulsar_custom_metadata(TOPIC), ctime_ms=1)
    w.managed_ledger(TOPIC, ledgers)
    return w


def _sent(broker: Broker) -> list[int]:
    return sorted(r.ledger_id for r in broker.sent)


def test_only_the_holder_passes_and_a_successor_catches_a_leak_made_during_the_hand_over(tmp_path: Path) -> None:
    clock, broker = Clock(), Broker()
    with open_store(f"sqlite:///{tmp_path / 'm.db'}") as store:
        w = _seed(store, [1, 2, 3, 4])
        a, b = Switch("a", True), Switch("b", False)
        role_a, role_b = _role(store, a, broker, clock), _role(store, b, broker, clock)
        assert role_a.tick() is not None and role_b.tick() is None  # only the holder reads
        w.managed_ledger(TOPIC, [2, 3, 4])  # ledger 1 leaves the list (its storage delete fails)
        role_a.tick()  # 1 departs: waiting out the settle delay (and the pass is kept at once)
        a.on = False  # the holder's connection is lost...
        w.managed_ledger(TOPIC, [3, 4])  # ...and ledger 2 leaks during the hand-over
        assert role_a.tick() is None and role_a.watcher is None  # the old holder drops its state
        b.on = True
        clock.now += SETTLE_S - 1
        first = role_b.tick()  # the successor compares with what the holder kept
        assert first is not None and first.departed == 1 and first.requested == []  # 2 departs now
        clock.now += 1
        assert [r.ledger_id for r in (role_b.tick() or first).requested] == [1]  # 1 kept its first-seen time
        clock.now += SETTLE_S
        role_b.tick()
        assert _sent(broker) == [1, 2]  # both leaks requested, each once, by the successor


def test_a_holder_that_dies_right_after_a_pass_hands_over_what_that_pass_saw(tmp_path: Path) -> None:
    """Ledger 5 is born, seen by one pass of a holder that dies right after it (the failpoint raises
    where a real holder would be SIGKILLed), and leaks before anyone passes again: the successor finds
    it only because that pass's reading was kept before it ended."""
    clock, broker = Clock(), Broker()
    with open_store(f"sqlite:///{tmp_path / 'm.db'}") as store:
        w = _seed(store, [1, 2])
        a, b = Switch("a", True), Switch("b", False)
        role_a = _role(store, a, broker, clock)
        role_a.tick()
        w.bk_ledger(5, pulsar_custom_metadata(TOPIC), ctime_ms=1)
        w.managed_ledger(TOPIC, [1, 2, 5])  # born
        failpoints.configure("watch.after-pass=raise")
        try:
            assert role_a.tick() is None  # the pass that saw 5, and the holder "dies" right after it
        finally:
            failpoints.configure("")
        a.on, b.on = False, True
        w.managed_ledger(TOPIC, [1, 2])  # 5 leaks during the hand-over
        role_b = _role(store, b, broker, clock)
        first = role_b.tick()
        assert first is not None and first.departed == 1  # 5 departs: it was in the kept reading
        clock.now += SETTLE_S
        role_b.tick()
        assert _sent(broker) == [5]


def test_a_pass_that_finds_it_lost_the_role_when_keeping_its_state_sends_nothing(tmp_path: Path) -> None:
    """Another holder saved the state meanwhile (two holders for a moment): the old one's pass keeps
    nothing over it, sends nothing, and stops watching."""
    clock, broker = Clock(), Broker()
    with open_store(f"sqlite:///{tmp_path / 'm.db'}") as store:
        w = _seed(store, [1, 2])
        role_a = _role(store, Switch("a", True), broker, clock)
        role_a.tick()
        w.managed_ledger(TOPIC, [2])
        role_a.tick()  # 1 waits out the settle delay
        role_b = _role(store, Switch("b", True), broker, clock)
        w.managed_ledger(TOPIC, [])
        clock.now += SETTLE_S
        role_b.tick()  # the other holder takes over and keeps its own state
        generation = persisted.load(store).generation
        assert role_a.tick() is None and role_a.watcher is None
        assert persisted.load(store).generation == generation
        assert _sent(broker) == [1]  # the other holder's send; none from the one that lost the role


def test_a_pass_that_requests_many_leaks_says_so_in_one_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A broker that fails every delete must not bury the log: one WARNING a pass, with a few of the
    leaks named and the rest counted (each one's request and outcome are in the audit trail)."""
    clock, broker = Clock(), Broker()
    with open_store(f"sqlite:///{tmp_path / 'm.db'}") as store:
        w = _seed(store, list(range(1, 11)))
        role = _role(store, Switch("a", True), broker, clock)
        role.tick()
        w.managed_ledger(TOPIC, [10])
        role.tick()
        clock.now += SETTLE_S
        with caplog.at_level(logging.WARNING, logger="deletion_service.leak_watcher"):
            role.tick()
        assert _sent(broker) == list(range(1, 10))
        lines = [r.getMessage() for r in caplog.records if "requested (leaked)" in r.getMessage()]
        assert len(lines) == 1, lines
        assert lines[0].startswith("leak watcher: 9 copy(ies) left every reference") and lines[0].endswith("and 6 more")


def test_a_request_the_broker_does_not_take_is_sent_again_next_pass(tmp_path: Path) -> None:
    clock, broker = Clock(), Broker()
    with open_store(f"sqlite:///{tmp_path / 'm.db'}") as store:
        w = _seed(store, [1, 2])
        role = _role(store, Switch("a", True), broker, clock)
        role.tick()
        w.managed_ledger(TOPIC, [2])
        role.tick()
        clock.now += SETTLE_S
        broker.refuse = True
        unsent = role.tick()
        assert unsent is not None and (unsent.requested, unsent.unsent) == ([], 1)
        broker.refuse = False
        role.tick()
        assert _sent(broker) == [1]


def test_a_leak_the_broker_deleted_in_time_gets_no_request_and_the_gauges_say_who_watches(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock, broker, metrics = Clock(), Broker(), DeletionMetrics(CollectorRegistry())
    with open_store(f"sqlite:///{tmp_path / 'm.db'}") as store:
        w = _seed(store, [1, 2, 3])
        role = _role(store, Switch("a", True), broker, clock, metrics)
        role.tick()
        assert metrics.value("pulsar_ledger_deletion_leak_watcher_leader") == 1
        kept = persisted.load(store)  # the first pass is kept at once, for a successor
        assert kept.state is not None and set(kept.state.reading.topics[TOPIC].listed) == {1, 2, 3}
        role.tick()
        assert persisted.load(store).generation == kept.generation  # nothing changed: nothing written
        w.managed_ledger(TOPIC, [3])
        path = ledger_path("/ledgers", 1, "hierarchical")
        node = store.get(path)
        assert node is not None
        store.delete(path, node.version)  # the broker's storage delete of 1 worked; 2's failed
        role.tick()
        clock.now += SETTLE_S + 5
        role.tick()
        assert _sent(broker) == [2]
        assert metrics.value("pulsar_ledger_deletion_leaks_observed_total",
                             {"kind": "ledger", "tenant": "t", "namespace": "ns"}) == 1
        assert metrics.value("pulsar_ledger_deletion_leak_watcher_lag_seconds") == 0  # the pass began just now
        clock.now += 7
        assert metrics.value("pulsar_ledger_deletion_leak_watcher_lag_seconds") == 7
        status = role.status()
        assert (status.watching, status.holder, status.waiting) == (True, "a", 0)
        with caplog.at_level(logging.INFO, logger="deletion_service.leak_watcher"):
            role.stop()
        assert metrics.value("pulsar_ledger_deletion_leak_watcher_leader") == 0
        assert not role.status().watching
        [said] = [r for r in caplog.records if "no longer watching" in r.getMessage()]
        assert said.levelno == logging.INFO, "a clean stop is no warning: log-based alerting sees each one"


def test_a_stop_during_a_pass_keeps_the_last_passes_state_not_one_without_the_leaks_being_sent(
        tmp_path: Path) -> None:
    """The pass took its due leaks out of the queue and is sending them (a slow broker) when the daemon
    stops: the state kept then must still have them, so the next watcher sends them."""
    clock, release, sending = Clock(), threading.Event(), threading.Event()
    sent: list[PendingDeleteLedgerInfo] = []

    def slow_send(requests: Sequence[PendingDeleteLedgerInfo]) -> Sequence[PendingDeleteLedgerInfo]:
        sending.set()
        release.wait(10)
        return requests  # the broker never took them

    with open_store(f"sqlite:///{tmp_path / 'm.db'}") as store:
        w = _seed(store, [1, 2])
        check = still_stored(store, "/ledgers", "hierarchical", OffloaderSettings())
        gauges = DeletionMetrics(CollectorRegistry()).leak_watcher
        role = WatcherRole(store, Switch("a", True), check, slow_send, gauges, SETTLE_S, clock=clock)
        role.tick()
        w.managed_ledger(TOPIC, [2])
        role.tick()  # 1 departs, kept as waiting
        clock.now += SETTLE_S
        passing = threading.Thread(target=role.tick)
        passing.start()
        assert sending.wait(10)
        role.stop(wait_s=0.2)  # the pass is still sending
        release.set()
        passing.join(10)
        broker = Broker()
        successor = WatcherRole(store, Switch("b", True), check, broker.send, gauges, SETTLE_S, clock=clock)
        successor.tick()
        assert _sent(broker) == [1], sent


def test_a_pass_whose_storage_check_fails_keeps_what_was_due_for_the_next(tmp_path: Path) -> None:
    clock, broker, calls = Clock(), Broker(), []
    with open_store(f"sqlite:///{tmp_path / 'm.db'}") as store:
        w = _seed(store, [1, 2])
        stored = still_stored(store, "/ledgers", "hierarchical", OffloaderSettings())

        def flaky(request: PendingDeleteLedgerInfo) -> bool:
            calls.append(request.ledger_id)
            if len(calls) == 1:
                raise OSError("the store hiccuped")
            return stored(request)

        gauges = DeletionMetrics(CollectorRegistry()).leak_watcher
        role = WatcherRole(store, Switch("a", True), flaky, broker.send, gauges, SETTLE_S, clock=clock)
        role.tick()
        w.managed_ledger(TOPIC, [2])
        role.tick()
        clock.now += SETTLE_S
        assert role.tick() is None  # the check failed: said, and nothing lost
        role.tick()
        assert _sent(broker) == [1]
