"""The scan's progress while it runs: which step, and each running Spark stage's tasks done.

Why our own and not Spark's console bar: Spark's bar (``spark.ui.showConsoleProgress``) is drawn
by the JVM on its stderr with carriage returns, which a log collector stores as one endless
line, and it cannot say which step of ours a stage belongs to.  Here a thread polls Spark's
status tracker and hands a line to ``show``: on a terminal every poll (the caller redraws one
status line), otherwise when the step changes and every ``every_s`` seconds (a CronJob's log
gets a line to read, not a flood).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from pyspark import SparkContext

#: Seconds between two lines of an unchanged step when stderr is not a terminal.
EVERY_S = 10.0
_BAR = 12


@dataclass(frozen=True)
class Stage:
    stage_id: int
    done: int
    total: int


def bar(done: int, total: int, width: int = _BAR) -> str:
    """``███░░░ 5/16``: the tasks of a stage done, out of its tasks."""
    filled = min(width, width * done // total) if total > 0 else 0
    return "█" * filled + "░" * (width - filled) + f" {done}/{total}"


def describe(step: str, stages: list[Stage], elapsed_s: float, terminal: bool) -> str:
    """One line: the step, then each running stage's tasks (a bar on a terminal)."""
    parts = [f"stage {s.stage_id} " + (bar(s.done, s.total) if terminal else f"{s.done}/{s.total} tasks")
             for s in stages]
    line = step + (": " + ", ".join(parts) if parts else "")
    return line if terminal else f"scan-orphans [{elapsed_s:.0f} s] {line}"


class ScanProgress:
    """A poller thread; :meth:`step` names what the scan does now; :meth:`stop` before ``spark.stop()``."""

    def __init__(self, sc: SparkContext, show: Callable[[str], None], terminal: bool, every_s: float = EVERY_S,
                 poll_s: float = 0.5, clock: Callable[[], float] = time.monotonic) -> None:
        self._tracker = sc.statusTracker()
        self._show, self._terminal, self._every_s, self._poll_s, self._clock = show, terminal, every_s, poll_s, clock
        self._started = clock()
        self._step = "starting"
        self._changed = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scan-progress", daemon=True)

    def start(self) -> ScanProgress:
        self._thread.start()
        return self

    def step(self, name: str) -> None:
        self._step = name
        self._changed.set()

    def stop(self, last_step: str | None = None) -> None:
        """Stop polling; ``last_step``: what the scan does after it (stopping Spark takes seconds with
        nothing else to show), said at once."""
        self._stopped.set()
        self._thread.join(timeout=5)
        if last_step is not None:
            self._step = last_step
            self._show(describe(last_step, [], self._clock() - self._started, self._terminal))

    def _stages(self) -> list[Stage]:
        try:
            infos = [self._tracker.getStageInfo(i) for i in sorted(self._tracker.getActiveStageIds())]
        except Exception:  # noqa: BLE001 - the context is stopping: progress is best effort
            return []
        return [Stage(i.stageId, i.numCompletedTasks, i.numTasks) for i in infos if i is not None]

    def _run(self) -> None:
        last_line = self._clock() - self._every_s
        while not self._stopped.is_set():
            changed = self._changed.is_set()
            self._changed.clear()
            now = self._clock()
            if self._terminal or changed or now - last_line >= self._every_s:
                self._show(describe(self._step, self._stages(), now - self._started, self._terminal))
                last_line = now
            self._changed.wait(self._poll_s)
