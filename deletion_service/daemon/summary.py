"""The daemon's periodic one-line summary: what happened lately, what is in hand, what is down.

An operator tailing the log of a quiet daemon otherwise sees nothing at all, and of
a busy one a line per request: neither answers "is it keeping up?".  Every
``interval_s`` one INFO line says how many requests ended how since the last
line, what the worker holds (and until when), and which dependency is down.
The same counts ride along as structured fields for JSON logs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from deletion_service.clock_text import local_moment
from deletion_service.delete_phase.consumer.worker import DeletePhaseWorker
from deletion_service.metrics import PREFIX, DeletionMetrics
from deletion_service.protocol.fate import Outcome

_log = logging.getLogger("deletion_service.daemon.summary")

#: The outcomes in the order the line names them.
ORDER = (Outcome.DELETED, Outcome.ABSENT, Outcome.STILL_IN_USE, Outcome.METADATA_MISMATCH, Outcome.RECONSUMED,
         Outcome.DLQ, Outcome.WOULD_DELETE)


class Summary:
    def __init__(self, metrics: DeletionMetrics, interval_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.metrics, self.interval_s, self.clock = metrics, interval_s, clock
        self._last_at = clock()
        self._last = self._counts()

    def _counts(self) -> dict[str, int]:
        sample = self.metrics.registry.get_sample_value
        return {o.value: int(sample(f"{PREFIX}_acked_total", {"outcome": o.value}) or 0) for o in ORDER}

    def due(self) -> bool:
        return self.interval_s > 0 and self.clock() - self._last_at >= self.interval_s

    def line(self, worker: DeletePhaseWorker | None) -> tuple[str, dict[str, object]]:
        """The line, and its fields; starts the next interval."""
        now, counts = self.clock(), self._counts()
        delta = {k: counts[k] - self._last[k] for k in counts}
        elapsed = now - self._last_at
        self._last_at, self._last = now, counts
        ended = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in delta.items() if n) or "nothing settled"
        parts = [f"last {elapsed:.0f} s: {ended}"]
        fields: dict[str, object] = {"summary": delta}
        if worker is not None:
            now_in_hand = worker.in_hand()
            parts.append(f"in hand: {held_text(worker)}, {now_in_hand.paused} paused for an outage, "
                         f"{now_in_hand.awaiting_next_try} awaiting another try to publish or ack")
            down = worker.dependencies_down()
            parts.append(f"down: {down}" if down else "dependencies: ok")
        return "; ".join(parts), fields

    def log(self, worker: DeletePhaseWorker | None) -> None:
        text, fields = self.line(worker)
        _log.info("%s", text, extra=fields)


def held_text(worker: DeletePhaseWorker) -> str:
    """``3 not yet due (not-yet until 2026-11-26 00:05:58; retry-delay 1 until 16:01:29)``: how many wait,
    why, and when each group's last falls due (its date when not today)."""
    groups = worker.intake.not_yet_due.groups()
    total = sum(g.count for g in groups)
    if not groups:
        return "0 not yet due"
    each = "; ".join(f"{g.reason.value} {g.count} until {local_moment(g.last_due_ms / 1000)}" for g in groups)
    return f"{total} not yet due ({each})"
