"""The long-running delete phase: wires its pieces together and drives their lifecycle (start, wait, stop).

Each job has its own module; this one only puts them together and runs them
in the order the CLI (``run``) and the tests drive:

* :mod:`.loop` — the delete-phase thread: batch after batch, chores between;
* :mod:`.gauges` — the backlog gauges, never a false 0, and every cursor in scope, read every few
  minutes for the cursor alert;
* :mod:`.periodic` — the gauges' own threads: a wedged batch must not freeze them;
* :mod:`.summary` — the periodic one-line summary;
* :mod:`.scope_refresh` — namespace scope: what to serve, and new namespaces;
* :mod:`.idle` — --exit-when-idle's judgement and what it says meanwhile;
* here — :meth:`Daemon.wait` (stopped, idle, out of time, or the embedded broker gone)
  and :meth:`Daemon.stop`.

Stopping (SIGTERM/SIGINT) lets the batch in hand finish — each of its
messages ends acked, reconsumed or dead-lettered — then closes the consumers,
which hands every message not yet taken (and RETRY messages held for later)
back to the subscription.  Nothing is lost at any point of a stop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from deletion_service.daemon.gauges import BacklogGauges, CursorHealthWatch, held_topics, parked_in_dlq
from deletion_service.daemon.idle import QUIET_S, IdleCheck, IdleState
from deletion_service.daemon.leak_watch import watcher_role
from deletion_service.daemon.loop import BatchLoop
from deletion_service.daemon.periodic import Periodic
from deletion_service.daemon.scope_refresh import NamespaceDiscovery
from deletion_service.daemon.summary import Summary
from deletion_service.delete_phase.consumer.worker import DeletePhaseWorker
from deletion_service.embedded.supervisor import BrokerSupervisor
from deletion_service.errors import EXIT_FAILURE, EXIT_NOT_IDLE, EXIT_OK
from deletion_service.inflight import BacklogSource
from deletion_service.leak_watcher.role import WatcherRole
from deletion_service.protocol.topics import DeletionTopics
from deletion_service.service import LedgerDeletionService

__all__ = ["CLOSE_WAIT_S", "QUIET_S", "STOP_WAIT_S", "Daemon", "IdleState"]

_log = logging.getLogger("deletion_service.daemon")  # the daemon and its pieces log under one name

#: How long a stop waits for the batch in hand.  Kubernetes kills 30 s after SIGTERM; the consumers'
#: and producers' close and the admin API's stop need the rest of it.
STOP_WAIT_S = 10.0
#: … and the offload deletes in hand, answered and recorded, until this long after SIGTERM (a slow object
#: store answers a delete it applied; exiting first left it recorded by nobody).  With CLOSE_WAIT_S, < 20 s.
LANE_STOP_WAIT_S = 15.0
CLOSE_WAIT_S = 3.0
#: … and a leak watcher pass under way, before its role is given up.
WATCHER_STOP_WAIT_S = 1.0


class Daemon:
    """The delete phase as a process runs it: started once, waited on, stopped once."""

    def __init__(
        self,
        service: LedgerDeletionService,
        backlog: BacklogSource,
        metrics_refresh_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        supervisor: BrokerSupervisor | None = None,
        summary_every_s: float = 60.0,
        namespaces: Callable[[], list[str]] | None = None,
        drain_cluster_topics: bool = True,
        leak_watcher: bool = True,
    ) -> None:
        self.service = service
        self.supervisor = supervisor
        self.clock = clock
        #: Set by a signal handler or :meth:`stop`: the loop ends after the batch in hand, :meth:`wait` returns.
        self.stop_event = threading.Event()
        self.worker: DeletePhaseWorker | None = None
        self._loop: BatchLoop | None = None
        self.started_at = clock()
        self.summary = Summary(service.metrics, summary_every_s, clock)
        #: namespace scope: the namespaces to serve, looked up again every ledgerDeletionNamespaceRefreshSeconds
        self.discovery = NamespaceDiscovery(service, namespaces, clock)
        self.drain_cluster_topics = drain_cluster_topics
        self.gauges = BacklogGauges(service.metrics, backlog, self._served, service.topics, metrics_refresh_s,
                                    clock, self.started_at, parked_in_dlq(service.broker, service.store),
                                    lambda: held_topics(self.worker))
        self.idle = IdleCheck(backlog, self._consumed, service.topics.subscription, clock, self.started_at)
        self.chores = [Periodic("backlog-gauges", self.gauges.refresh_if_due, 1.0, self.stop_event)]
        if (every := service.config.ledger_deletion_cursor_health_refresh_seconds) > 0:
            self.chores.append(Periodic("cursor-health", CursorHealthWatch.for_service(service).check, every,
                                        self.stop_event))
        #: one replica watches the metadata store for ledgers a one-phase broker leaked (None: off here)
        self.leak_watcher = watcher_role(service) if leak_watcher else None
        if self.leak_watcher is not None:
            self.chores.append(Periodic("leak-watcher", self.leak_watcher.tick,
                                        service.config.ledger_deletion_leak_watcher_pass_seconds, self.stop_event))

    @property
    def backlog(self) -> BacklogSource:
        """Where the gauges and the idle check read the backlog (one source for both)."""
        return self.gauges.backlog

    @backlog.setter
    def backlog(self, source: BacklogSource) -> None:
        self.gauges.backlog = self.idle.backlog = source

    def _served(self) -> list[DeletionTopics]:
        return self.service.served or [self.service.topics]

    def _consumed(self) -> list[str]:
        """Every request and RETRY topic this daemon reads."""
        return [c for t in self._served() for c in t.consumed]

    def start(self) -> None:
        served = self.discovery.first()
        self.worker = self.service.start(namespaces=served, drain_cluster_topics=self.drain_cluster_topics)
        self.discovery.say_served(served)
        self._loop = BatchLoop(self.worker, self.stop_event, self._between_batches)
        self._loop.start()
        for chore in self.chores:
            chore.start()

    def _between_batches(self) -> None:
        """The chores, on the delete-phase thread: the summary line, new namespaces (the gauges have their
        own threads: :attr:`chores`)."""
        if self.summary.due() and self.worker is not None:
            self.summary.log(self.worker)
        self.discovery.look_again_if_due()

    def idle_state(self) -> IdleState:
        """--exit-when-idle: see :mod:`.idle`."""
        return self.idle.state(self.worker)

    def wait(self, exit_when_idle: bool, max_wait_s: float | None, poll_s: float = 1.0) -> int:
        """Block until stopped (0), idle (0), out of time waiting for idle (3) or the embedded broker gone (1)."""
        deadline = None if max_wait_s is None else self.clock() + max_wait_s
        last = IdleState(False)
        while not self.stop_event.is_set():
            if self.supervisor is not None and not self.supervisor.check():
                return EXIT_FAILURE
            if exit_when_idle:
                last = self.idle_state()
                if last.idle:
                    _log.info("idle: nothing in flight")
                    return EXIT_OK
                self.idle.say_why_waiting(self.worker)
            if deadline is not None and self.clock() >= deadline:
                _log.warning("not idle after %.0fs: %s", max_wait_s, last.why_not)
                return EXIT_NOT_IDLE
            self.stop_event.wait(poll_s)
        return EXIT_OK

    def _stop_leak_watcher(self, role: WatcherRole) -> None:
        """Keep the watcher's state and give the role up (a pass under way is waited for a moment only: the
        state kept after the last pass stands, see :meth:`WatcherRole.stop`)."""
        try:
            role.stop(wait_s=WATCHER_STOP_WAIT_S)
        except Exception:  # noqa: BLE001 - the successor re-reads; a failed save loses at most one interval
            _log.warning("leak watcher: could not keep its state at stop", exc_info=True)

    def liveness(self) -> str | None:
        """``/healthz``: None while this daemon can do its work, else why not (then it is exiting)."""
        return self.supervisor.failure if self.supervisor is not None else None

    def stop(self) -> None:
        """Finish the batch in hand (for up to :data:`STOP_WAIT_S`), then return everything else to the
        subscription.  Messages parked because the broker refused their publish or ack are not retried:
        unacked, they come back to the next run, which settles them; nothing is lost."""
        self.stop_event.set()
        watcher_stop = None
        if self.leak_watcher is not None:  # beside the batch's finish, not after it: the stop has one 20 s bound
            watcher_stop = threading.Thread(target=self._stop_leak_watcher, args=(self.leak_watcher,),
                                            name="leak-watcher-stop", daemon=True)
            watcher_stop.start()
        if self._loop is not None:
            self._loop.finish(STOP_WAIT_S, LANE_STOP_WAIT_S)
        if watcher_stop is not None:
            watcher_stop.join(WATCHER_STOP_WAIT_S + 1.0)
        closing = threading.Thread(target=self.service.close, name="close", daemon=True)
        closing.start()  # a hung broker makes each close wait out its operation timeout: bounded here
        closing.join(CLOSE_WAIT_S)
        if closing.is_alive():
            _log.warning("the broker did not confirm closing the consumers within %.0f s; exiting anyway (the "
                         "broker redelivers whatever was not acked)", CLOSE_WAIT_S)
