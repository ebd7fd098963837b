"""Circuit breakers: a dependency outage pauses the work; it never spends a request's retries.

Found from outside: with ZooKeeper down, the daemon moved its whole backlog to
RETRY at about 150 messages/s, each pass counting as a retry.  A 47 s outage
with a 1 s reconsume delay dead-lettered all 267 pending requests; with the
600 s default, a 16 s outage delayed 2,500 requests by ten minutes.

A transient failure says only that *something* did not answer.  When a batch
ends with one, each breaker probes its dependency once; if a probe fails, that
dependency is down: the breaker opens (one WARNING), the worker keeps the
batch's transient requests in hand, unacked and uncounted, takes no new
messages, and ``/readyz`` answers 503.  The open breaker probes again every
second; once its dependency answers it closes (one INFO line with how long),
and the held requests run again as if nothing had happened.  A daemon stopped
during an outage hands them back unacked, so nothing is lost either way.  A
transient failure while every probe succeeds was the request's own: it is
reconsumed and counted, as before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

_log = logging.getLogger(__name__)

#: How often an open breaker asks its dependency again.
PROBE_EVERY_S = 1.0


class Breaker:
    """One dependency, probed by ``probe`` (which raises when the dependency does not answer)."""

    def __init__(self, name: str, probe: Callable[[], object], clock: Callable[[], float] = time.monotonic,
                 probe_every_s: float = PROBE_EVERY_S) -> None:
        self.name, self.probe, self.clock, self.probe_every_s = name, probe, clock, probe_every_s
        self.opened_at: float | None = None
        self.why = ""
        self._next_probe = 0.0
        self._lock = threading.Lock()

    @property
    def open(self) -> bool:
        return self.opened_at is not None

    def describe(self) -> str | None:
        """For ``/readyz``: how long it has been down and why, or None while closed.  Reads
        ``opened_at`` once: the worker thread may close the breaker meanwhile."""
        opened_at = self.opened_at
        if opened_at is None:
            return None
        return f"{self.name} down for {self.clock() - opened_at:.0f} s ({self.why})"

    def _answers(self) -> str | None:
        """None when the dependency answers; else why not, in one line."""
        try:
            self.probe()
        except Exception as e:  # noqa: BLE001 - any failure to answer is "down"; the reason is kept
            return f"{type(e).__name__}: {e}".splitlines()[0]
        return None

    def confirm_down(self) -> bool:
        """After a transient failure: is this dependency down right now?  Opens the breaker if so."""
        with self._lock:
            if self.opened_at is not None:
                return True
            why = self._answers()
            if why is None:
                return False
            self.opened_at, self.why = self.clock(), why
            self._next_probe = self.opened_at + self.probe_every_s
            _log.warning("%s is down (%s): consuming paused, requests in hand are held, no retry is counted; "
                         "resuming when it answers", self.name, why)
            return True

    def ready(self) -> bool:
        """Closed, or open and its dependency answers now (then it closes)."""
        with self._lock:
            if self.opened_at is None:
                return True
            now = self.clock()
            if now < self._next_probe:
                return False
            why = self._answers()
            if why is not None:
                self.why, self._next_probe = why, self.clock() + self.probe_every_s
                return False
            _log.info("%s answers again after %.1f s: consuming resumes", self.name, now - self.opened_at)
            self.opened_at = None
            return True


class Breakers:
    """The breakers of every dependency a request's verification needs."""

    def __init__(self, breakers: Sequence[Breaker] = ()) -> None:
        self.breakers = list(breakers)

    def any_down(self) -> bool:
        """Probe each (once): True if at least one dependency is down (every down one opens)."""
        return any([b.confirm_down() for b in self.breakers])  # a list: probe them all, not the first only

    def ready(self) -> bool:
        return all([b.ready() for b in self.breakers])

    def down(self) -> str | None:
        """For ``/readyz``: the open breakers and why, or None."""
        return "; ".join(d for b in self.breakers if (d := b.describe()) is not None) or None
