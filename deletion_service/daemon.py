"""The long-running delete phase: worker loop, metric refresh, idle detection, graceful stop.

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
from dataclasses import dataclass

from deletion_service.broker.interface import BrokerError
from deletion_service.daemon_summary import Summary
from deletion_service.delete_phase.worker import DeletePhaseWorker
from deletion_service.embedded.supervisor import BrokerSupervisor
from deletion_service.errors import EXIT_FAILURE, EXIT_NOT_IDLE, EXIT_OK
from deletion_service.inflight import BacklogSource
from deletion_service.service import LedgerDeletionService
from deletion_service.topics import DeletionTopics

_log = logging.getLogger(__name__)

#: How long a stop waits for the batch in hand.  Kubernetes kills 30 s after SIGTERM; the consumers'
#: and producers' close and the admin API's stop need the rest of it.
STOP_WAIT_S = 10.0
CLOSE_WAIT_S = 3.0

#: --exit-when-idle: no message may have arrived for this long.
QUIET_S = 3.0


@dataclass
class IdleState:
    idle: bool
    why_not: str = ""


class Daemon:
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
    ) -> None:
        self.service = service
        self.supervisor = supervisor
        self.backlog = backlog
        self.metrics_refresh_s = metrics_refresh_s
        self.clock = clock
        self.stop_event = threading.Event()
        self.worker: DeletePhaseWorker | None = None
        self._thread: threading.Thread | None = None
        self._last_refresh = 0.0
        self._gauge_warned = False
        self._gauges_read = False
        self.started_at = clock()
        self.summary = Summary(service.metrics, summary_every_s, clock)
        #: namespace scope: the namespaces to serve, looked up again every ledgerDeletionNamespaceRefreshSeconds
        self.namespaces = namespaces
        self.drain_cluster_topics = drain_cluster_topics
        self._last_discovery = clock()
        self._waiting_said = 0.0

    def start(self) -> None:
        served = self.namespaces() if self.namespaces is not None else None
        self.worker = self.service.start(namespaces=served, drain_cluster_topics=self.drain_cluster_topics)
        if served is not None:
            _log.info("namespace scope: serving %d namespace(s)%s", len(served),
                      f": {', '.join(served[:10])}{' …' if len(served) > 10 else ''}" if served else "")
        self._thread = threading.Thread(target=self._loop, name="delete-phase", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        assert self.worker is not None
        while not self.stop_event.is_set():
            try:
                self.worker.run_once(0.2)
            except Exception:  # noqa: BLE001 - the loop must outlive any one batch
                _log.exception("delete-phase loop error; continuing")
                time.sleep(1)
            # Until the first trusted reading, try every second; then every metrics_refresh_s.
            every = self.metrics_refresh_s if self._gauges_read else 1.0
            if self.clock() - self._last_refresh >= every:
                self.refresh_gauges()
            if self.summary.due():
                self.summary.log(self.worker)
            self._discover_namespaces()

    def _discover_namespaces(self) -> None:
        """Namespace scope: subscribe to namespaces created since the last look (worker thread, between batches)."""
        every = self.service.config.ledger_deletion_namespace_refresh_seconds
        if self.namespaces is None or self.clock() - self._last_discovery < every:
            return
        self._last_discovery = self.clock()
        try:
            new = self.service.serve_namespaces(self.namespaces())
        except Exception as e:  # noqa: BLE001 - the store or broker is down: the next look tries again
            _log.warning("looking for new namespaces failed (%s); trying again in %d s", e, every)
            return
        if new:
            _log.info("now serving %d more namespace(s): %s", len(new), ", ".join(new))

    def _served(self) -> list[DeletionTopics]:
        return self.service.served or [self.service.topics]

    def _consumed(self) -> list[str]:
        """Every request and RETRY topic this daemon reads."""
        return [c for t in self._served() for c in t.consumed]

    def refresh_gauges(self) -> None:
        """The backlog gauges, once the broker's statistics can be trusted: not before they were
        refreshed after this daemon started (``staleness_s``), or they would say 0 for requests parked."""
        self._last_refresh = self.clock()
        if self.clock() - self.started_at < self.backlog.staleness_s:
            return
        try:
            m, served, topics = self.service.metrics, self._served(), self.service.topics
            # one reading each for every namespace served (a broker's statistics are one page)
            m.estimated_inflight.set(sum(self.backlog.backlog(self._consumed(), topics.subscription).values()))
            m.dlq_size.set(sum(self.backlog.backlog([t.dlq for t in served], topics.dlq_subscription).values()))
            self._gauges_read = True
        except BrokerError as e:
            if not self._gauge_warned:
                _log.warning("cannot refresh backlog gauges: %s", e)
                self._gauge_warned = True

    def idle_state(self) -> IdleState:
        """--exit-when-idle: nothing in hand or held, quiet for 3 s, and a backlog of 0 once what
        this worker acknowledged after the (possibly stale) reading is taken off it."""
        w = self.worker
        if w is None:
            return IdleState(False, "not started")
        if not w.idle:
            return IdleState(False, f"{w.held} request(s) waiting out a retry delay" if w.held else "processing")
        quiet_since = max(w.last_message_at, self.started_at)
        if self.clock() - quiet_since < QUIET_S:
            return IdleState(False, "messages arrived in the last 3 s")
        try:
            backlog = self.backlog.backlog(self._consumed(), self.service.topics.subscription)
        except BrokerError as e:
            return IdleState(False, f"backlog unknown: {e}")
        pending = w.acked.explains(backlog, self.backlog.staleness_s)
        if pending:
            return IdleState(False, f"backlog {sum(pending.values())} on {len(pending)} topic(s)")
        return IdleState(True)

    def wait(self, exit_when_idle: bool, max_wait_s: float | None, poll_s: float = 1.0) -> int:
        """Block until stopped (0), idle (0) or out of time waiting for idle (3)."""
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
                self._say_why_waiting()
            if deadline is not None and self.clock() >= deadline:
                _log.warning("not idle after %.0fs: %s", max_wait_s, last.why_not)
                return EXIT_NOT_IDLE
            self.stop_event.wait(poll_s)
        return EXIT_OK

    def _say_why_waiting(self, every_s: float = 30.0) -> None:
        """--exit-when-idle waiting out long retry delays: say how many and until when, now and then."""
        w = self.worker
        until = w.held_until() if w is not None else None
        if w is None or until is None or self.clock() - self._waiting_said < every_s:
            return
        self._waiting_said = self.clock()
        _log.info("waiting out retry delays: %d request(s) held, the last due at %s", w.held,
                  time.strftime("%H:%M:%S", time.localtime(until)))

    def liveness(self) -> str | None:
        """``/healthz``: None while this daemon can do its work, else why not (then it is exiting)."""
        return self.supervisor.failure if self.supervisor is not None else None

    def stop(self) -> None:
        """Finish the batch in hand (for up to :data:`STOP_WAIT_S`), then return everything else to the
        subscription.  Messages parked because the broker refused their publish or ack are not retried:
        unacked, they come back to the next run, which settles them; nothing is lost."""
        self.stop_event.set()
        if self.worker is not None:
            self.worker.stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=STOP_WAIT_S)
            if self._thread.is_alive():
                _log.warning("the batch in hand did not finish within %.0f s; its unacked messages return to the "
                             "subscription", STOP_WAIT_S)
        closing = threading.Thread(target=self.service.close, name="close", daemon=True)
        closing.start()  # a hung broker makes each close wait out its operation timeout: bounded here
        closing.join(CLOSE_WAIT_S)
        if closing.is_alive():
            _log.warning("the broker did not confirm closing the consumers within %.0f s; exiting anyway (the "
                         "broker redelivers whatever was not acked)", CLOSE_WAIT_S)
