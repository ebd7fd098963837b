"""Circuit breakers: a dependency outage pauses the work; it never spends a request's retries.

Without them, a ZooKeeper outage would move the whole backlog to RETRY at
about 150 messages/s, each pass counting as a retry.  A 47 s outage with a
1 s reconsume delay would dead-letter all 267 pending requests; with the
600 s default, a 16 s outage would delay 2,500 requests by ten minutes.

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
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

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


#: Longest wait between two probes of an offload target that keeps not answering.
MAX_PROBE_EVERY_S = 60.0
#: Offload targets remembered at once; beyond, the longest-closed (else longest-open) is forgotten.
MAX_TARGETS = 1024


@dataclass
class _Target:
    key: str
    opened_at: float | None = None
    why: str = ""
    #: answered at least once in this process's life: a genuine target, whose outage is the daemon's
    answered: bool = False
    #: a call failed transiently since it last answered: other requests wait for the probe's verdict
    suspect: bool = False
    probe: Callable[[], object] | None = None
    probing: bool = False
    next_probe: float = 0.0
    every_s: float = PROBE_EVERY_S


class TargetNotAnswering(Exception):  # noqa: N818 - a state, like MetadataStoreUnavailable
    """A request's offload target is open (or suspect): the request is not sent to storage."""


class TargetBreakers:
    """One breaker per offload target (driver family + endpoint + bucket): a target that does not
    answer costs its own requests, never another target's.

    With one breaker for the whole offload lane, probed with the first failing
    request's endpoint, one forged request naming an endpoint that never
    answers would open it, and the lane would stop for good: no genuine
    offloaded copy would be deleted again.  So:

    * a call that fails transiently makes its target *suspect* (``failed``): a
      request that starts afterwards is not sent there (``gate``), so a hung
      endpoint costs one round of timeouts, not one per request;
    * the offload lane then asks ``confirm_down``: one probe (a HEAD) decides.
      No answer opens the target's breaker; an answer clears it, and the
      failure was the request's own (reconsumed and counted, as ever);
    * an open target is probed again on two threads of its own, never the
      lane's, backing off to :data:`MAX_PROBE_EVERY_S`; once it answers it
      closes (one INFO line) and the lane runs what it held for it;
    * only a target that has answered before counts as "the daemon's
      dependency is down" (``describe``, for ``/readyz``): a request naming an
      endpoint that never answered cannot make the daemon look unready.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, probe_every_s: float = PROBE_EVERY_S,
                 max_probe_every_s: float = MAX_PROBE_EVERY_S, max_targets: int = MAX_TARGETS) -> None:
        self.clock, self.probe_every_s, self.max_probe_every_s = clock, probe_every_s, max_probe_every_s
        self.max_targets = max_targets
        self._targets: OrderedDict[str, _Target] = OrderedDict()
        self._lock = threading.Lock()
        self._probes = ThreadPoolExecutor(max_workers=2, thread_name_prefix="offload-probe")

    def gate(self, keys: Iterable[str]) -> str | None:
        """Why a request for these targets must not touch storage now (open or suspect), or None."""
        with self._lock:
            for key in keys:
                t = self._targets.get(key)
                if t is not None and (t.opened_at is not None or t.suspect):
                    state = "is not answering" if t.opened_at is not None else "just failed, being probed"
                    return f"offload target {key} {state} ({t.why}); not tried"
        return None

    def has_answered(self, key: str) -> bool:
        with self._lock:
            t = self._targets.get(key)
            return t is not None and t.answered

    def opened_for_s(self, key: str) -> float | None:
        with self._lock:
            t = self._targets.get(key)
            return None if t is None or t.opened_at is None else self.clock() - t.opened_at

    def answered(self, key: str) -> None:
        """A call to the target got an answer (any answer): it is reachable; closes it if open."""
        with self._lock:
            t = self._target(key)
            t.answered, t.suspect = True, False
            if t.opened_at is not None:
                _log.info("offload target %s answers again after %.1f s", key, self.clock() - t.opened_at)
                t.opened_at, t.every_s = None, self.probe_every_s

    def failed(self, key: str, why: str, probe: Callable[[], object]) -> None:
        """A call to the target failed transiently: suspect until ``confirm_down`` probes it."""
        with self._lock:
            t = self._target(key)
            t.probe = probe
            if t.opened_at is None:
                t.suspect, t.why = True, (why.splitlines() or ["no answer"])[0]

    def confirm_down(self, key: str) -> bool:
        """Is the target down?  Open: yes.  Suspect: one probe, here and now, decides (and opens it).
        Neither (or another thread probing it): no."""
        with self._lock:
            t = self._targets.get(key)
            if t is None:
                return False
            if t.opened_at is not None:
                return True
            if not t.suspect or t.probing or t.probe is None:
                return False
            t.probing, probe = True, t.probe
        why = _no_answer(probe)
        with self._lock:
            t.probing, t.suspect = False, False
            if why is None:
                t.answered = True
                return False
            t.opened_at, t.why = self.clock(), why
            t.every_s = self.probe_every_s
            t.next_probe = t.opened_at + t.every_s
            level = logging.WARNING if t.answered else logging.INFO
        _log.log(level, "offload target %s is not answering (%s): its requests are held, then parked; other "
                 "targets go on", key, why)
        return True

    def tick(self) -> None:
        """Start the probes of open targets that are due (never waits for one)."""
        now = self.clock()
        with self._lock:
            due = [t for t in self._targets.values()
                   if t.opened_at is not None and not t.probing and t.probe is not None and t.next_probe <= now]
            for t in due:
                t.probing = True
        for t in due:
            self._probes.submit(self._probe, t)

    def _probe(self, t: _Target) -> None:
        assert t.probe is not None
        why = _no_answer(t.probe)
        with self._lock:
            t.probing = False
            if why is not None:
                t.why = why
                t.every_s = min(self.max_probe_every_s, t.every_s * 2)
                t.next_probe = self.clock() + t.every_s
                return
        self.answered(t.key)

    def open_keys(self) -> list[str]:
        with self._lock:
            return [k for k, t in self._targets.items() if t.opened_at is not None]

    def describe(self) -> str | None:
        """For ``/readyz``: the targets that answered before and do not now (a target that never
        answered is a request's claim, not the daemon's dependency), or None."""
        now = self.clock()
        with self._lock:
            down = [f"offload target {k} down for {now - t.opened_at:.0f} s ({t.why})"
                    for k, t in self._targets.items() if t.opened_at is not None and t.answered]
        return "; ".join(down) or None

    def close(self) -> None:
        self._probes.shutdown(wait=False, cancel_futures=True)

    def _target(self, key: str) -> _Target:
        """The key's breaker (caller holds the lock), made on first sight; bounded in number."""
        t = self._targets.get(key)
        if t is None:
            if len(self._targets) >= self.max_targets:
                victim = next((k for k, v in self._targets.items() if v.opened_at is None), None)
                self._targets.pop(victim if victim is not None else next(iter(self._targets)))
            t = self._targets[key] = _Target(key)
        self._targets.move_to_end(key)
        return t


def _no_answer(probe: Callable[[], object]) -> str | None:
    """None when the probe got an answer; else why not, in one line."""
    try:
        probe()
    except Exception as e:  # noqa: BLE001 - any failure to answer is "down"; the reason is kept
        return (f"{type(e).__name__}: {e}".splitlines() or ["no answer"])[0]
    return None
