"""The delete-phase thread: one batch after another, and between two batches the daemon's chores.

The chores (the summary line, namespace discovery) run on this thread
between batches, never during one: subscribing to a new namespace cannot race
a batch.  The gauges have their own threads (:mod:`.periodic`).
The loop outlives any one batch's error (logged, then a second's pause).

Stopping: the stop event ends the loop after the batch in hand, and the
worker's ``stopping`` tells that batch to settle what it holds rather than
start anything new.  :meth:`BatchLoop.finish` waits for that, bounded: a batch
that does not finish in time is left to the process exit, and its unacked
messages return to the subscription.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from deletion_service.delete_phase.consumer.worker import DeletePhaseWorker

_log = logging.getLogger("deletion_service.daemon")  # the daemon's pieces log under one name

#: How long a batch may take to receive before run_once returns for the chores and the stop event.
RECEIVE_WAIT_S = 0.2


class BatchLoop:
    """Runs ``worker`` on its own thread until ``stop_event``; calls ``between_batches`` after each batch."""

    def __init__(self, worker: DeletePhaseWorker, stop_event: threading.Event,
                 between_batches: Callable[[], None]) -> None:
        self.worker, self._stop_event, self._between_batches = worker, stop_event, between_batches
        self._thread = threading.Thread(target=self._run, name="delete-phase", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop_event.is_set():
            try:
                self.worker.run_once(RECEIVE_WAIT_S)
            except Exception:  # noqa: BLE001 - the loop must outlive any one batch
                _log.exception("delete-phase loop error; continuing")
                time.sleep(1)
            self._between_batches()

    def finish(self, wait_s: float, lane_wait_s: float | None = None) -> None:
        """Let the batch in hand finish (the stop event is set by the caller), for up to ``wait_s``; then
        the offload deletes in hand, until ``lane_wait_s`` (default ``wait_s``) after this call."""
        deadline = time.monotonic() + (wait_s if lane_wait_s is None else lane_wait_s)
        self.worker.stopping.set()
        self._thread.join(timeout=wait_s)
        if self._thread.is_alive():
            _log.warning("the batch in hand did not finish within %.0f s; its unacked messages return to the "
                         "subscription", wait_s)
            return
        # This thread now owns the dispositions: the offload deletes in hand, answered and recorded.
        self.worker.settle_lanes(max(0.0, deadline - time.monotonic()))
