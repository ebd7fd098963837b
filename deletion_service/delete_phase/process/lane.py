"""The delete-process lane: BookKeeper requests decided by the delete process while the worker goes on.

The worker hands each batch's BookKeeper requests here and returns at once to dispose of the
batch before and to take the next; a thread of this lane sends each batch to the delete process
(:mod:`.child`) and waits for its verdicts, without the GIL, so the daemon's two halves
run on two cores.  Decided requests come back to the worker thread through :meth:`finished`,
which alone publishes, records and acks, as for the offload lane.

At most :data:`BATCHES` batches wait for or are in the delete process (one there, one waiting), and
one decided batch waits for the worker, so the requests held unacked stay bounded by three batches.
Batches are decided one at a time in the order they came, so a ledger named in two batches is
verified again after the first delete.  The process reads and decides a batch while the worker
disposes of the one before, but deletes only once the worker has disposed of (recorded) every batch
decided before (:meth:`DeleteProcessLane.disposed`).  If the delete process dies, the batch it held
is decided as a transient failure (reconsumed later and verified from scratch: a delete it did is
then found absent) and a new process is started for the next batch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from deletion_service.delete_phase.consumer.copies import attempts, grace_since
from deletion_service.delete_phase.process.child import DeleteBatchFailed, DeleteProcess, DeleteProcessDied
from deletion_service.delete_phase.rules import decision
from deletion_service.delete_phase.rules.decision import Kind, Policy
from deletion_service.delete_phase.rules.lifecycle import MessageInHand

_log = logging.getLogger(__name__)

#: Batches in the lane at once: one being decided, one waiting for its turn.
BATCHES = 2
#: The pause before a new delete process is started after one could not be.
RESTART_BACKOFF_S = 1.0
#: A batch this long in the delete process makes ``/readyz`` fail (one takes well under a second; under
#: ``maxDeletionsPerSecond`` at most about one; without it, a SIGSTOPped process would hold every
#: request while ``/readyz`` said 200).
DECIDING_TOO_LONG_S = 15.0


@dataclass
class LaneBatch:
    """One batch of BookKeeper requests; ``with_offloads``: its offload requests went to the offload lane."""

    items: list[MessageInHand]
    with_offloads: bool = False


class DeleteProcessLane:
    """BookKeeper requests in (a batch at a time), decided ones out, on a thread that waits for the process."""

    def __init__(self, start_process: Callable[[], DeleteProcess], policy: Policy) -> None:
        self._start_process, self.policy = start_process, policy
        self._process: DeleteProcess | None = start_process()
        self._inbox: deque[LaneBatch] = deque()
        self._working: LaneBatch | None = None
        self._working_since = 0.0  # monotonic, when the batch in the delete process was sent
        self._outbox: list[LaneBatch] = []
        self._disposing = 0  # batches the worker took from the outbox and is disposing of
        #: False while the worker may not delete (its audit trail refuses records): the process waits too
        self.may_delete: Callable[[], bool] = lambda: True
        self._quiescing = False
        self._down: str | None = None
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="delete-process-lane", daemon=True)
        self._thread.start()

    @property
    def pid(self) -> int | None:
        """The delete process's PID (for tests and ``/status``), None between two processes."""
        process = self._process
        return process.pid if process is not None else None

    @property
    def in_flight(self) -> int:
        with self._cond:
            batches = [*self._inbox, *self._outbox, *([self._working] if self._working else [])]
            return sum(len(b.items) for b in batches)

    def room(self) -> int:
        """Batches that may still be submitted (those decided and not yet taken back do not count: the
        worker takes them back before it takes in more, so at most one more batch is in hand)."""
        with self._cond:
            return max(0, BATCHES - len(self._inbox) - (self._working is not None))

    def submit(self, items: list[MessageInHand], with_offloads: bool = False) -> None:
        with self._cond:
            self._inbox.append(LaneBatch(items, with_offloads))
            self._cond.notify_all()

    def has_finished(self) -> bool:
        return bool(self._outbox)

    def finished(self) -> list[LaneBatch]:
        """Decided batches, oldest first, for the worker thread to dispose of; it says :meth:`disposed`
        when it has (the next batch's deletes wait for that)."""
        with self._cond:
            out, self._outbox = self._outbox, []
            self._disposing += len(out)
            return out

    def disposed(self, batches: int) -> None:
        """The worker has disposed of (recorded, published, acked or left for another try) ``batches`` of
        those :meth:`finished` gave it."""
        with self._cond:
            self._disposing -= batches
            self._cond.notify_all()

    def wait_finished(self, timeout_s: float) -> None:
        """Until a batch is decided (or ``timeout_s``): the lane is full and the worker has nothing to do."""
        with self._cond:
            if not self._outbox:
                self._cond.wait(timeout_s)

    def wait_ready(self, timeout_s: float, stop: threading.Event | None = None) -> bool:
        """Until the delete process has opened its stores (raises ``DeleteProcessDied`` with why not);
        False if ``stop`` was set first."""
        return self._process.wait_ready(timeout_s, stop) if self._process is not None else True

    def down(self) -> str | None:
        """For ``/readyz``: the delete process is not running (and why), or has held a batch too long."""
        if self._down is not None:
            return self._down
        process = self._process
        if process is not None and not process.ready:  # ready: nothing could be deleted before it is
            return f"the delete process (pid {process.pid}) is starting"
        with self._cond:
            working, since = self._working, self._working_since
        held_s = time.monotonic() - since
        if working is not None and held_s > DECIDING_TOO_LONG_S:
            return (f"the delete process has held a batch of {len(working.items)} request(s) for {held_s:.0f} s "
                    f"without an answer (pid {self.pid})")
        return None

    def quiesce(self, wait_s: float) -> int:
        """A graceful stop: start no batch, and wait up to ``wait_s`` for the one in the delete process
        (then :meth:`finished` has it).  Returns how many requests are still being decided; what is
        queued stays unacked and returns to the subscription."""
        deadline = time.monotonic() + wait_s
        with self._cond:
            self._quiescing = True
            self._cond.notify_all()
            while self._working is not None and (left := deadline - time.monotonic()) > 0:
                self._cond.wait(left)
            return len(self._working.items) if self._working is not None else 0

    def stop(self, wait_s: float) -> None:
        """End the delete process first (a second to exit, then SIGKILL: it answers at once unless it is
        stopped or hung, and a batch it was deciding is left unacked), then this lane's thread.  Found
        from outside: the process was asked last, after the daemon's own close bound, and one stopped as
        it started outlived a daemon that exited cleanly."""
        self._stop.set()
        with self._cond:
            self._quiescing = True
            self._cond.notify_all()
        process = self._process
        if process is not None:
            process.close(min(1.0, wait_s))
        self._thread.join(wait_s)

    # ---- the lane's thread

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self._cond:
                if not self._inbox or self._quiescing:
                    self._cond.wait(0.2)
                    continue
                batch = self._working = self._inbox.popleft()
                self._working_since = time.monotonic()
            self._decide(batch)
            with self._cond:
                self._working = None
                self._outbox.append(batch)
                self._cond.notify_all()

    def _decide(self, batch: LaneBatch) -> None:
        items = batch.items
        tries = [attempts(d.message) for d in items]
        try:
            process = self._ready_process()
            actions = process.run([d.admitted for d in items], tries, self.policy,
                                  [grace_since(d.message) for d in items], self._wait_recorded)
        except DeleteProcessDied as e:
            self._lost(str(e))
            actions = [decision.retry_later(f"{e}; verified again when it comes back", t, self.policy)
                       for t in tries]
        except DeleteBatchFailed as e:
            actions = [decision.retry_later(str(e), t, self.policy, kind=Kind.INTERNAL_ERROR) for t in tries]
        for d, action in zip(items, actions, strict=True):
            d.decide(action)

    def _wait_recorded(self) -> None:
        """Until every batch decided before has been disposed of (so recorded) and the worker may delete: only
        then may the delete process delete the batch it holds, decided meanwhile.  Raises when the lane stops
        first."""
        with self._cond:
            while self._outbox or self._disposing or not self.may_delete():
                if self._stop.is_set():
                    raise DeleteProcessDied("the daemon is stopping before the batch before was recorded")
                self._cond.wait(0.2)

    def _ready_process(self) -> DeleteProcess:
        if self._stop.is_set():
            raise DeleteProcessDied("the daemon is stopping")
        if self._process is None:
            self._process = self._start_process()
        self._process.wait_ready()
        self._down = None
        return self._process

    def _lost(self, why: str) -> None:
        """The process died or could not start: say so once, and start a new one for the next batch."""
        if self._stop.is_set():
            return  # ended by :meth:`stop`: its batch stays unacked, nothing more starts
        _log.error("%s: its batch is reconsumed and verified again; starting a new delete process", why)
        self._down = why
        if self._process is not None:
            self._process.close(0.0)
        self._process = None
        self._stop.wait(RESTART_BACKOFF_S)
