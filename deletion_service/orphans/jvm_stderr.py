"""The driver JVM's stderr, passed through a filter on its way to ours.

Why a filter and not a JVM flag: Spark 4 starts its JVM with ``--add-modules
jdk.incubator.vector`` and the Java launcher then prints ``WARNING: Using incubator modules``
on every start; no option silences that line.  PySpark lets the caller choose the gateway's
``stderr``, so we read it through a pipe and drop that one line, and everything once the scan
was interrupted (cancelled tasks' warnings after a Ctrl-C say nothing the operator asked about).
Spark's own log lines (``log4j2.properties``: warnings and errors) pass unchanged.
"""

from __future__ import annotations

import os
import threading
from typing import IO

#: Lines the JVM prints on every start that tell an operator nothing.
NOISE = (b"WARNING: Using incubator modules:",)


class JvmStderr:
    """Copies the JVM's stderr pipe to file descriptor 2, line by line, minus :data:`NOISE`."""

    def __init__(self, pipe: IO[bytes], out_fd: int = 2) -> None:
        self._pipe = pipe
        self._out_fd = out_fd
        self._muted = threading.Event()
        self._thread = threading.Thread(target=self._copy, name="jvm-stderr", daemon=True)

    def start(self) -> JvmStderr:
        self._thread.start()
        return self

    def mute(self) -> None:
        """Drop everything from now on (the scan was interrupted)."""
        self._muted.set()

    def _copy(self) -> None:
        for line in iter(self._pipe.readline, b""):
            if self._muted.is_set() or line.startswith(NOISE):
                continue
            try:
                os.write(self._out_fd, line)
            except OSError:  # our stderr is gone (a closed pipe): keep draining so the JVM never blocks
                continue
