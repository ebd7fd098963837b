"""A chore on its own thread, every few seconds, until the daemon stops.

Why not between two batches on the delete-phase thread, as the summary line and
namespace discovery run: the gauges that say the delete phase is stuck must not be
refreshed by the thread that is stuck.  A batch wedged on a hung dependency froze
``request_backlog`` at its last reading (0, or no sample at all right after a
start), so ``LedgerDeletionStuck`` could not fire exactly when it should.  And a
chore that reads every cursor in the cluster must not delay a batch.

A chore's error is logged once (and again only after it succeeded in between),
never ends the thread: the next round tries again.  Errors after the stop (the
stores close under a chore in flight) are not logged.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

_log = logging.getLogger("deletion_service.daemon")  # the daemon's pieces log under one name


class Periodic:
    """Runs ``chore`` now, then every ``every_s`` seconds, on a daemon thread named ``name``."""

    def __init__(self, name: str, chore: Callable[[], object], every_s: float, stop_event: threading.Event) -> None:
        self.name, self._chore, self.every_s, self._stop_event = name, chore, every_s, stop_event
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._failing = False

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop_event.is_set():
            self.run_once()
            self._stop_event.wait(self.every_s)

    def run_once(self) -> None:
        try:
            self._chore()
            self._failing = False
        except Exception:  # noqa: BLE001 - a chore's error must not end its thread: the next round retries
            if not self._failing and not self._stop_event.is_set():
                _log.warning("%s failed (retried every %.0f s)", self.name, self.every_s, exc_info=True)
            self._failing = True
