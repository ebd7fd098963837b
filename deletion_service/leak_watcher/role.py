"""The leak watcher as a role of the daemon: exactly one replica watches, and a successor misses nothing.

Each replica contends for the role through the metadata store (:meth:`MetadataStore.leadership`:
kazoo's lock recipe on ZooKeeper; the embedded store's one daemon holds it at once).  Every
``ledgerDeletionLeakWatcherPassSeconds`` the holder runs one pass (:mod:`.watcher`); a replica that
does not hold the role does nothing but say who does.

Taking the role over loads what the previous holder kept (:mod:`.persisted`), so the first pass
compares with it: whatever left every reference during the hand-over (or while no daemon ran)
departs then, and the departures that were waiting keep their first-seen times.  Losing the role
drops everything in memory (the successor has the kept state); the next take-over loads it again.
Each pass saves the state once it has compared its reading, before it checks storage or sends
(the requests it sends leave the kept waiting list with the next pass's save), and the daemon saves
it when it stops: a copy this watcher saw is then in the kept reading even when the watcher dies
right after the pass, so a successor catches it however soon after the hand-over it leaves, and
sends again at most what one pass sent (each second request settles as already absent).  What no
watcher saw (born and gone between the holder's last pass and the successor's first, a session
timeout apart) is the scheduled scan's.

Whatever the holder sends is a claim the delete phase verifies; two holders for a moment (a
connection suspended after ``holds()`` was checked) can only send a request twice.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from deletion_service.failpoints import failpoint
from deletion_service.leak_watcher import persisted
from deletion_service.leak_watcher.sightings import namespace_of
from deletion_service.leak_watcher.watcher import LeakWatcher, PassResult
from deletion_service.metrics import LeakWatcherGauges, leak_kind
from deletion_service.protocol.request import PendingDeleteLedgerInfo
from metastore.interface import (
    ABSENT,
    BadVersionError,
    Leadership,
    MetadataStore,
    MetadataStoreError,
    NodeExistsError,
    NoNodeError,
)

_log = logging.getLogger("deletion_service.leak_watcher")

#: A failing pass is said at most this often.
FAILURE_SAID_EVERY_S: Final = 60.0
#: The role's path in the metadata store: one holder per cluster.
ROLE_PATH: Final = f"{persisted.ROOT}/leader"


def replica_name() -> str:
    """How this replica is named to operators: the pod's name on Kubernetes (its hostname), and the PID."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class WatcherStatus:
    """For ``status``: who watches, and how far behind."""

    enabled: bool
    watching: bool  # this replica
    holder: str | None  # whoever watches (this replica or another), None when nobody does or unknown
    last_pass_at: float | None  # wall-clock seconds: when the last completed pass began reading
    lag_s: float | None
    waiting: int
    settle_s: float


class _LostRole(Exception):
    """Another replica saved the watcher's state since this one loaded it: this pass sends nothing."""


class WatcherRole:
    """One replica's part in watching for leaks: contend, and while holding the role, run passes."""

    def __init__(self, store: MetadataStore, leadership: Leadership,
                 still_stored: Callable[[PendingDeleteLedgerInfo], bool],
                 send: Callable[[Sequence[PendingDeleteLedgerInfo]], Sequence[PendingDeleteLedgerInfo]],
                 gauges: LeakWatcherGauges, settle_s: float, clock: Callable[[], float] = time.time) -> None:
        self.store, self.leadership, self.still_stored, self._send = store, leadership, still_stored, send
        self.gauges, self.settle_s, self.clock = gauges, settle_s, clock
        self.watcher: LeakWatcher | None = None
        self._passing = threading.Lock()  # a pass, or the save at stop: never both
        self._failed, self._failure_said_at = 0, -math.inf
        self._kept = persisted.Loaded(None, ABSENT, 0)
        self.last_pass_at: float | None = None
        self.gauges.lag.set_function(self._lag)

    def _lag(self) -> float:
        if self.watcher is None or self.last_pass_at is None:
            return 0.0
        return max(0.0, self.clock() - self.last_pass_at)

    def tick(self) -> PassResult | None:
        """The chore: one pass when this replica holds the role (None otherwise).  A pass that fails is
        said every time (at most once a minute), with how many failed since the last good one: a
        watcher that cannot pass catches no leak, and its lag grows (``LedgerDeletionLeakWatcherBehind``)."""
        with self._passing:
            try:
                return self._tick()
            except Exception as e:
                self._failed += 1
                if self.clock() - self._failure_said_at >= FAILURE_SAID_EVERY_S:
                    self._failure_said_at = self.clock()
                    _log.warning("leak watcher: pass failed (%d since the last good one): %s: %s", self._failed,
                                 type(e).__name__, e, exc_info=self._failed == 1)
                return None

    def _tick(self) -> PassResult | None:
        if not self.leadership.holds():
            self._step_down("another replica watches")
            return None
        if self.watcher is None:
            self._take_over()
        assert self.watcher is not None
        started = self.clock()
        try:
            result = self.watcher.run_pass(now=started)
        except _LostRole:
            return None
        self._failed, self._failure_said_at = 0, -math.inf
        failpoint("watch.after-pass")
        self.last_pass_at = started
        self.gauges.last_pass.set(started)
        self.gauges.waiting.set(result.waiting)
        for request in result.requested:
            tenant, _, namespace = namespace_of(request.topic_name).partition("/")
            self.gauges.leaks_observed.labels(kind=leak_kind(request.ledger_type), tenant=tenant,
                                              namespace=namespace).inc()
        return result

    def _take_over(self) -> None:
        try:
            self._kept = persisted.load(self.store)
        except persisted.StateUnreadable as e:
            _log.warning("leak watcher: the kept state cannot be used (%s): starting from a fresh reading; leaks "
                         "made before it are the scheduled scan's to find", e)
            self._kept = persisted.replacing_unreadable(self.store)
        state = self._kept.state
        self.watcher = LeakWatcher(self.store, self.still_stored, self._send_while_holding, self.settle_s,
                                   clock_ms=lambda: int(self.clock() * 1000), state=state, keep=self._keep)
        self.gauges.leader.set(1)
        if state is None:
            _log.info("leak watcher: watching the metadata store; the first pass only looks")
        else:
            _log.info("leak watcher: watching the metadata store from the kept reading (%d topics, %d waiting "
                      "out the settle delay)", len(state.reading.topics), len(state.waiting))

    def _send_while_holding(self, requests: Sequence[PendingDeleteLedgerInfo]) -> Sequence[PendingDeleteLedgerInfo]:
        if not self.leadership.holds():
            return requests
        failpoint("watch.before-send")
        return self._send(requests)

    def _step_down(self, why: str, expected: bool = False) -> None:
        """Stop watching; said as a warning unless ``expected`` (a clean stop is no problem: log-based
        alerting must not see one at every rollout)."""
        if self.watcher is not None:
            _log.log(logging.INFO if expected else logging.WARNING, "leak watcher: no longer watching (%s)", why)
        self.watcher = None
        self.last_pass_at = None
        self.gauges.leader.set(0)
        self.gauges.waiting.set(0)

    def _keep(self, state: persisted.WatcherState) -> None:
        """A pass's state, kept before it sends: a pass of a replica that lost the role ends here."""
        if not self._save(state):
            raise _LostRole

    def save(self) -> None:
        """Keep the watcher's state for a successor."""
        state = self.watcher.state() if self.watcher is not None else None
        if state is not None:
            self._save(state)

    def _save(self, state: persisted.WatcherState) -> bool:
        """Keep ``state``; False when another holder has saved since (this replica lost the role: it steps
        down and lets the other watch).  A state that cannot be written is said, and the pass goes on."""
        try:
            self._kept = persisted.save(self.store, state, self._kept)
        except (BadVersionError, NodeExistsError, NoNodeError):
            self._step_down("another replica saved the watcher's state since this one loaded it")
            return False
        except persisted.StateTooLarge as e:
            _log.warning("leak watcher: its state is too large to keep (%s): a successor would start from a fresh "
                         "reading", e)
        except MetadataStoreError as e:
            _log.warning("leak watcher: could not keep its state (%s); trying again after the next pass", e)
        return True

    def status(self) -> WatcherStatus:
        return WatcherStatus(True, self.watcher is not None and self.leadership.holds(), self.leadership.holder(),
                             self.last_pass_at, self._lag() if self.watcher is not None else None,
                             len(self.watcher.queue) if self.watcher is not None else 0, self.settle_s)

    def stop(self, wait_s: float = 5.0) -> None:
        """Save (when holding) and give the role up.  Never while a pass is under way: a pass that took
        its due leaks out of the queue and has not sent them would be kept without them; if the pass
        does not end within ``wait_s``, the state kept after the last pass stands (it still has them)."""
        if self._passing.acquire(timeout=wait_s):
            try:
                if self.watcher is not None and self.leadership.holds():
                    self.save()
            finally:
                self._passing.release()
        else:
            _log.warning("leak watcher: a pass is still under way at stop; the state kept after the last one stands")
        self.leadership.close()
        self._step_down("the daemon stops", expected=True)
