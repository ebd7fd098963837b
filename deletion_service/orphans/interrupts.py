"""Ctrl-C during a scan: one line (``interrupted``, exit 130), the JVM gone, no py4j tracebacks.

Why not PySpark's own handling: ``SparkContext`` installs a SIGINT handler that cancels the
jobs from inside the handler, over the py4j connection the interrupted call is still reading,
and py4j logs each failure with a traceback on the root logger (50 lines for one Ctrl-C).
Here a Ctrl-C is a plain ``KeyboardInterrupt``: it unwinds to the caller's ``spark.stop()``,
which cancels the jobs and ends the application (on a cluster too).  py4j's log records about
the broken call are dropped, and the JVM's stderr is muted (cancelled tasks' warnings).

While the JVM is being launched a Ctrl-C is held back: PySpark does not hand us the process
until the launch returns, and a launch abandoned half-way leaves a JVM that never exits.  Once
the launch returns, the held interrupt stops that JVM and is raised.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from deletion_service.orphans.jvm_stderr import JvmStderr


class NotFromPy4J(logging.Filter):
    """py4j logs on the root logger (``logging.exception``) when a call is interrupted or its
    connection breaks.  Matched by message and exception, not by source file: our logging
    configuration does not look up callers (``logs.py``, for speed)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).endswith("while sending command."):
            return False
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, KeyboardInterrupt) and not type(error).__module__.startswith("py4j")


class QuietInterrupts:
    """The SIGINT handling of one scan's session (main thread only; elsewhere it does nothing)."""

    def __init__(self) -> None:
        self._jvm_stderr: JvmStderr | None = None
        self._held = False
        self._holding = False

    def install(self) -> None:
        """Drop py4j's records and make Ctrl-C plain; again after ``SparkContext`` put its own in."""
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
        root = logging.getLogger()
        if not any(isinstance(f, NotFromPy4J) for f in root.filters):
            root.addFilter(NotFromPy4J())
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._interrupted)

    def watch(self, jvm_stderr: JvmStderr) -> None:
        self._jvm_stderr = jvm_stderr

    @contextmanager
    def held(self) -> Iterator[list[subprocess.Popen]]:
        """Hold Ctrl-C back; the caller appends the JVM it launched, which a held Ctrl-C stops."""
        launched: list[subprocess.Popen] = []
        self._holding = True
        try:
            yield launched
        finally:
            self._holding = False
        if self._held:
            for proc in launched:
                proc.kill()
                proc.wait()
            raise KeyboardInterrupt

    def _interrupted(self, _signum: int, _frame: FrameType | None) -> None:
        if self._holding:
            self._held = True
            return
        if self._jvm_stderr is not None:
            self._jvm_stderr.mute()
        raise KeyboardInterrupt
