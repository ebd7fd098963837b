"""--exit-when-idle: when the daemon may say its work is done, and what it says while it is not.

Idle needs all of: nothing in hand or held for a retry delay, no message for
:data:`QUIET_S`, and a backlog of 0 on every request and RETRY topic served
once what this worker acknowledged after the (possibly stale) reading is
taken off it.  A backlog the broker cannot report is not 0: the answer is
"not idle", with the reason.  The DLQ is not waited for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from deletion_service.broker.interface import BrokerError
from deletion_service.clock_text import local_moment
from deletion_service.daemon.summary import held_text
from deletion_service.delete_phase.consumer.worker import DeletePhaseWorker
from deletion_service.inflight import BacklogSource

_log = logging.getLogger("deletion_service.daemon")  # the daemon's pieces log under one name

#: --exit-when-idle: no message may have arrived for this long.
QUIET_S = 3.0


@dataclass
class IdleState:
    idle: bool
    why_not: str = ""


class IdleCheck:
    """Judges idleness from the worker, the clock and one backlog reading of the topics consumed."""

    def __init__(self, backlog: BacklogSource, consumed: Callable[[], list[str]], subscription: str,
                 clock: Callable[[], float], started_at: float) -> None:
        self.backlog, self._consumed, self._subscription = backlog, consumed, subscription
        self._clock, self._started_at = clock, started_at
        self._waiting_said = 0.0

    def state(self, worker: DeletePhaseWorker | None) -> IdleState:
        """Nothing in hand or held, quiet for 3 s, and a backlog of 0 once what this worker
        acknowledged after the (possibly stale) reading is taken off it."""
        w = worker
        if w is None:
            return IdleState(False, "not started")
        if not w.idle:
            waiting = w.in_hand().not_yet_due
            return IdleState(False, f"waiting out retry delays: {held_text(w)}" if waiting else "processing")
        quiet_since = max(w.last_message_at, self._started_at)
        if self._clock() - quiet_since < QUIET_S:
            return IdleState(False, "messages arrived in the last 3 s")
        try:
            backlog = self.backlog.backlog(self._consumed(), self._subscription)
        except BrokerError as e:
            return IdleState(False, f"backlog unknown: {e}")
        pending = w.ack_tally.explains(backlog, self.backlog.staleness_s)
        if pending:
            return IdleState(False, f"backlog {sum(pending.values())} on {len(pending)} topic(s)")
        return IdleState(True)

    def say_why_waiting(self, worker: DeletePhaseWorker | None, every_s: float = 30.0) -> None:
        """Waiting out long retry delays: say how many and until when, now and then."""
        if worker is None:
            return
        in_hand = worker.in_hand()
        until = in_hand.not_yet_due_until
        if until is None or self._clock() - self._waiting_said < every_s:
            return
        self._waiting_said = self._clock()
        _log.info("waiting out retry delays: %d request(s) held, the last due at %s (%s); --exit-when-idle exits "
                  "once the last is settled, or at --max-wait", in_hand.not_yet_due, local_moment(until),
                  held_text(worker))
