"""The offload lane: tiered-storage requests verified and deleted on their own thread.

Found from outside: offload and BookKeeper requests shared a batch, so with the
S3 endpoint hung each offload request cost about 20 s and no BookKeeper ledger
was deleted for a minute, while ``/readyz`` said 200 and nothing was logged.
Now the worker hands each batch's offload requests to this lane and goes on
with the BookKeeper ones; decided requests come back to the worker thread,
which alone publishes and acks (one thread owns the dispositions, as before).

The lane has its own breaker (:mod:`.breaker`): when an offload batch ends in
transient failures and a HEAD of one of their objects fails too, the endpoint
is down: the lane keeps those requests, unacked and uncounted, probes every
second, and runs them again once it answers.  It holds at most ``capacity``
requests; the worker defers offload requests beyond that to RETRY with their
attempts unchanged, so an outage can neither fill memory nor block
BookKeeper deletions.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from deletion_service.delete_phase.breaker import Breaker
from deletion_service.delete_phase.decision import Policy
from deletion_service.delete_phase.dispose import grace_since
from deletion_service.delete_phase.pipeline import DeletePipeline

_log = logging.getLogger(__name__)


class OffloadLane:
    """A queue of undecided offload requests in, decided ones out; ``_Pending`` items from the worker."""

    def __init__(self, pipeline: DeletePipeline, policy: Policy, probe_for: Callable[[Any], Callable[[], object]],
                 attempts: Callable[[Any], int], capacity: int = 2_000, batch_size: int = 100) -> None:
        self.pipeline, self.policy = pipeline, policy
        self.probe_for, self.attempts = probe_for, attempts  # an object HEAD for a request; its tries so far
        self.capacity, self.batch_size = capacity, batch_size
        self.breaker = Breaker("the offload (S3) endpoint", lambda: None)
        self._inbox: deque[Any] = deque()
        self._outbox: list[Any] = []
        self._working = 0
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="offload-lane", daemon=True)
        self._thread.start()

    @property
    def in_flight(self) -> int:
        with self._cond:
            return len(self._inbox) + self._working + len(self._outbox)

    def room(self) -> int:
        return max(0, self.capacity - self.in_flight)

    def submit(self, items: list[Any]) -> None:
        with self._cond:
            self._inbox.extend(items)
            self._cond.notify()

    def finished(self) -> list[Any]:
        """Decided requests, for the worker thread to publish and ack."""
        with self._cond:
            out, self._outbox = self._outbox, []
            return out

    def stop(self, wait_s: float) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify()
        self._thread.join(wait_s)

    def _take(self) -> list[Any]:
        with self._cond:
            if not self._inbox:
                self._cond.wait(0.2)
            n = min(self.batch_size, len(self._inbox))
            batch = [self._inbox.popleft() for _ in range(n)]
            self._working = len(batch)
            return batch

    def _loop(self) -> None:
        while not self._stop.is_set():
            if not self.breaker.ready():
                self._stop.wait(0.2)
                continue
            batch = self._take()
            if not batch:
                continue
            try:
                done = self._run(batch)
            except Exception:  # noqa: BLE001 - the lane outlives any batch; its requests go back unacked
                _log.exception("offload lane: a batch of %d failed; they are decided again", len(batch))
                done = []
                with self._cond:
                    self._inbox.extendleft(reversed(batch))
            with self._cond:
                self._outbox.extend(done)
                self._working = 0

    def _run(self, batch: list[Any]) -> list[Any]:
        actions = self.pipeline.run([p.request for p in batch], [self.attempts(p) for p in batch], self.policy,
                                    [grace_since(p.message) for p in batch])
        for p, action in zip(batch, actions, strict=True):
            p.action = action
        transient = [p for p in batch if p.action.transient]
        if transient:
            self.breaker.probe = self.probe_for(transient[0].request)
            if self.breaker.confirm_down():
                with self._cond:
                    self._inbox.extendleft(reversed(transient))  # held: decided again once it answers
                return [p for p in batch if not p.action.transient]
        return batch
