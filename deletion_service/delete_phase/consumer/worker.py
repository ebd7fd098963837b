"""The delete-phase consumer: take a batch in, decide it, carry each message out of our hands.

Three parts, one job each, driven here one batch at a time on one thread:
:mod:`.intake` takes messages from the request and RETRY consumers (holding
RETRY messages until due, re-acking redeliveries of settled ones); the
pipeline decides them (``delete_phase.pipeline``, or ``delete_phase.offload.lane`` for tiered
storage, so S3 never holds up a BookKeeper deletion; with a delete process,
``delete_phase.process.lane`` for BookKeeper, so deciding one batch overlaps
disposing of the one before on another core); :mod:`.disposer`
publishes, records and acks.  Where a message stands and what it may do next
is the lifecycle table (``delete_phase.rules.lifecycle``); every verdict, including those met
before any fact is gathered, comes from ``delete_phase.rules.decision``.  What stays here is
the order of a pass and what holds it back: a dependency outage (take nothing,
pause what it failed, spend no retry) and a full list of refused dispositions
(take nothing new until the broker takes those).  Unacked messages return to
the subscription when the worker stops, so stopping at any point loses nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from deletion_service import logs
from deletion_service.broker.interface import Consumer
from deletion_service.broker.publisher import CopyPublisher
from deletion_service.delete_phase.consumer import copies as dispose
from deletion_service.delete_phase.consumer.ack_tally import AckTally
from deletion_service.delete_phase.consumer.disposer import Disposer, Hooks, Settled
from deletion_service.delete_phase.consumer.intake import Intake, Limits
from deletion_service.delete_phase.consumer.settled_recently import SettledRecently
from deletion_service.delete_phase.offload.admission import SOON_S
from deletion_service.delete_phase.offload.lane import OffloadLane
from deletion_service.delete_phase.pipeline import DeletePipeline
from deletion_service.delete_phase.process.lane import DeleteProcessLane
from deletion_service.delete_phase.rules import decision, lifecycle
from deletion_service.delete_phase.rules.decision import Action, Policy
from deletion_service.delete_phase.rules.lifecycle import Event, Gate, MessageInHand, Stage
from deletion_service.delete_phase.rules.seal import Seal
from deletion_service.delete_phase.storage.breaker import Breakers
from deletion_service.failpoints import failpoint
from deletion_service.metrics import DeletionMetrics
from deletion_service.protocol.request import InvalidRequest, LedgerType, decode

_log = logging.getLogger(__name__)

__all__ = ["DeletePhaseWorker", "Hooks", "InHand", "Limits", "Settled"]


@dataclass(frozen=True)
class InHand:
    """What the worker holds unacked, for ``/status``, ``/readyz`` and the periodic summary."""

    not_yet_due: int  # RETRY messages waiting for their delay to pass (in memory, or set aside unacked)
    not_yet_due_until: float | None  # when the last of them falls due (Unix seconds)
    paused: int  # requests whose verification met a dependency outage, kept until it ends
    awaiting_next_try: int  # dispositions the broker refused (publish or ack), retried with backoff


class DeletePhaseWorker:
    """One batch at a time: :class:`.intake.Intake` takes messages in, the pipeline decides them (or the
    offload lane does), :class:`.disposer.Disposer` carries them out.  One thread owns every disposition."""

    def __init__(self, requests: Consumer, retries: Consumer, publisher: CopyPublisher,
                 pipeline: DeletePipeline, policy: Policy, metrics: DeletionMetrics,
                 limits: Limits | None = None, hooks: Hooks | None = None, breakers: Breakers | None = None,
                 offload_lane: OffloadLane | None = None, clock: Callable[[], float] = time.time,
                 bookkeeper_lane: DeleteProcessLane | None = None, seal: Seal | None = None) -> None:
        self.pipeline, self.policy, self.metrics = pipeline, policy, metrics
        self.limits = limits or Limits()
        self.hooks = hooks or Hooks()
        self.breakers = breakers or Breakers()
        self.offload_lane = offload_lane
        #: BookKeeper requests decided by the delete process (``delete_phase.process.lane``); None: here, inline
        self.bookkeeper_lane = bookkeeper_lane
        self.ack_tally = AckTally()  # what we acked lately: explains a stale backlog reading (--exit-when-idle)
        settled_recently = SettledRecently()
        shared = (settled_recently, self.ack_tally, clock, seal)  # seal: what copies say of us, believed only if sealed
        self.intake = Intake(requests, retries, publisher, policy, metrics, self.limits, *shared)
        self.disposer = Disposer(publisher, metrics, self.limits, self.hooks, *shared)
        # the lanes' deletes wait while the trail refuses records, as this thread's do
        for lane in (bookkeeper_lane, offload_lane):
            if lane is not None:
                lane.may_delete = lambda: self.disposer.trail_refused() is None
        self.busy = False
        #: Set when the daemon stops: finish the batch in hand, retry nothing parked, take nothing new
        #: (what is left unacked returns to the subscription when the consumers close).
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        #: requests whose verification met a dependency outage: kept in hand, unacked, until it ends
        self._paused: list[MessageInHand] = []

    # ---- state the daemon reads (--exit-when-idle, /readyz, /status)

    @property
    def last_message_at(self) -> float:
        return self.intake.last_message_at

    def in_hand(self) -> InHand:
        until = self.intake.not_yet_due.until_ms()
        return InHand(self.intake.not_yet_due.held_total(), until / 1000 if until is not None else None,
                      len(self._paused), len(self.disposer.awaiting_next_try))

    @property
    def idle(self) -> bool:
        return (not self.busy and not self.intake.not_yet_due.held_total() and not self.disposer.awaiting_next_try
                and not self._paused and (self.offload_lane is None or self.offload_lane.in_flight == 0)
                and (self.bookkeeper_lane is None or self.bookkeeper_lane.in_flight == 0))

    def dependencies_down(self) -> str | None:
        """For ``/readyz``: every open breaker (metadata stores, offload targets that answered before) and why."""
        lane = self.offload_lane.down() if self.offload_lane is not None else None
        process = self.bookkeeper_lane.down() if self.bookkeeper_lane is not None else None
        return "; ".join(d for d in (self.breakers.down(), lane, process, self.disposer.trail_refused()) if d) or None

    def stuck(self) -> str | None:
        return self.disposer.stuck()

    # ---- the loop

    def run(self, stop: threading.Event, poll_s: float = 0.2) -> None:
        while not stop.is_set():
            self.run_once(poll_s)

    def run_once(self, wait_s: float = 0.2) -> int:
        """Receive and process one batch; returns how many messages were settled."""
        with self._lock:
            if self.stopping.is_set():
                return 0
            with logs.one_write_per_batch():
                self.disposer.try_again()
            # Every message taken may end up waiting here: take no more than there is room for.
            waiting = self.disposer.awaiting_next_try
            room = min(self.limits.batch_size, self.limits.max_awaiting_next_try - len(waiting))
            if lifecycle.gate(waiting, self.breakers.ready, room) != Gate.OPEN:
                time.sleep(min(wait_s, 0.2))  # a refused record, an outage or no room: take nothing new
                return 0
            with logs.one_write_per_batch():  # a batch's INFO lines in one write (see logs.py)
                settled = self._settle_offloads() + self._settle_bookkeeper_lane()
            lane = self.bookkeeper_lane
            if lane is not None and lane.room() <= 0:  # two batches with the delete process: settle one first
                lane.wait_finished(min(wait_s, 0.2))
                with logs.one_write_per_batch():
                    return settled + self._settle_bookkeeper_lane()
            batch = self._resume_paused() or self.intake.collect(
                wait_s, room, until=lane.has_finished if lane is not None and lane.in_flight else None)
            if lane is not None and lane.has_finished():  # first: the delete process waits for these records
                with logs.one_write_per_batch():
                    settled += self._settle_bookkeeper_lane()
            if not batch:
                return settled
            self.busy = True
            try:
                with logs.one_write_per_batch():
                    return settled + self._process(batch)
            finally:
                self.busy = False

    def _resume_paused(self) -> list[MessageInHand]:
        """Held through an outage now over (the breakers let us here): theirs is the turn."""
        batch, self._paused = self._paused, []
        self.metrics.on_hold.set(0)
        for d in batch:
            d.resume()
        return batch

    # ---- deciding

    def _process(self, batch: list[MessageInHand]) -> int:
        undecided = [d for d in batch if not self._admit(d)]
        to_pipeline, in_lane = self._to_offload_lane(undecided)
        if to_pipeline and self.bookkeeper_lane is not None:
            # decided by the delete process while this thread goes on; the failpoint below is reached
            # when they come back (``_settle_bookkeeper_lane``), their deletes done
            for d in to_pipeline:
                d.advance(Event.SEND_TO_LANE)
            self.bookkeeper_lane.submit(to_pipeline, with_offloads=bool(in_lane))
        else:
            if to_pipeline:
                for d, action in zip(to_pipeline, self._decide_here(to_pipeline), strict=True):
                    d.decide(action)
            if in_lane:  # this batch's BookKeeper deletes are done; its offload deletes wait in their lane
                failpoint("delete.between-bookkeeper-and-offload")
        # What went to a lane stays the lane's (IN_LANE, then LANE_DECIDED) until this thread takes it
        # back from ``finished``: only what was decided here is DECIDED now.
        return self._dispose_all([d for d in batch if d.stage == Stage.DECIDED])

    def _decide_here(self, items: list[MessageInHand]) -> list[Action]:
        """The pipeline's verdicts on this thread; if it fails past its own per-request guards (a bug), the
        batch is reconsumed as an internal error, not left in hand unacked."""
        tries = [dispose.attempts(d.message) for d in items]
        try:
            return self.pipeline.run([d.admitted for d in items], tries, self.policy,
                                     [dispose.grace_since(d.message) for d in items])
        except Exception as e:  # noqa: BLE001 - the batch is settled either way
            _log.exception("deciding a batch of %d failed", len(items))
            return [decision.retry_later(f"{type(e).__name__}: {e}", t, self.policy, kind=decision.Kind.INTERNAL_ERROR)
                    for t in tries]

    def _admit(self, d: MessageInHand) -> bool:
        """Decode a message not decoded yet and check it may be acted on here; True if that decided it
        already (an invalid payload, a request from another namespace's topic)."""
        if d.request is not None:
            return False  # resumed after an outage: decoded and admitted before
        try:
            d.request = decode(d.message.data)
        except InvalidRequest as e:
            d.undecodable = True
            d.decide(decision.invalid(str(e)))
            return True
        except Exception as e:  # noqa: BLE001 - decode promises InvalidRequest only; never trust it with a batch
            d.undecodable = True
            d.decide(decision.invalid(f"{type(e).__name__}: {e}"))
            return True
        refused = self.hooks.guard(d.message, d.request) if self.hooks.guard is not None else None
        if refused is not None:
            d.decide(decision.cross_namespace(refused))
            return True
        return False

    def _to_offload_lane(self, undecided: list[MessageInHand]) -> tuple[list[MessageInHand], list[MessageInHand]]:
        """Offload requests go to their own lane, so S3 never holds up a BookKeeper deletion; those it does not
        take in are deferred (``offload.admission``).  Returns what the pipeline decides now, what went to the lane."""
        lane = self.offload_lane
        offloads = [d for d in undecided if d.admitted.ledger_type == LedgerType.OFFLOAD_LEDGER] \
            if lane is not None else []
        if lane is None or not offloads:
            return undecided, []
        door = lane.admit(offloads, time.monotonic())
        for d in door.taken:
            d.advance(Event.SEND_TO_LANE)
        lane.submit(door.taken)
        for d in door.soon:
            d.decide(decision.offload_lane_full(self.policy, SOON_S))
        for d, delay_s in zip(door.later, door.later_s, strict=True):
            d.decide(decision.offload_lane_full(self.policy, delay_s))
        return [d for d in undecided if d.stage == Stage.RECEIVED], door.taken

    def settle_lanes(self, wait_s: float) -> None:
        """A graceful stop, once this worker's loop has ended: the batch the delete process holds and the
        offload deletes in hand are answered (up to ``wait_s``) and settled here, recorded and acked,
        before the process exits; what no lane has begun stays unacked for the subscription to redeliver."""
        deadline = time.monotonic() + wait_s
        with self._lock, logs.one_write_per_batch():  # the batch it decided first: its records let the next delete
            settled = self._settle_bookkeeper_lane()
        left = self.bookkeeper_lane.quiesce(max(0.0, deadline - time.monotonic())) \
            if self.bookkeeper_lane is not None else 0  # within the one bound: records may have waited
        if self.offload_lane is not None:
            left += self.offload_lane.quiesce(max(0.0, deadline - time.monotonic()))
        with self._lock, logs.one_write_per_batch():
            settled += self._settle_offloads() + self._settle_bookkeeper_lane()
        if left:
            _log.warning("stopping: %d request(s) still being decided after %.0f s (unsettled, redelivered; a "
                         "delete the store applies meanwhile is recorded by the run that settles it as absent)",
                         left, wait_s)
        elif settled:
            _log.info("stopping: settled the %d request(s) the lanes had in hand", settled)

    def _settle_offloads(self) -> int:
        """Dispose of the offload requests the lane has decided (this thread owns every disposition)."""
        if self.offload_lane is None:
            return 0
        done = self.offload_lane.finished()
        if not done:
            return 0
        try:
            for d in done:
                d.take_back()
            self._dispose_all(done)
        finally:
            self.offload_lane.disposed(len(done))  # recorded: the lane's next deletes may go on
        return len(done)

    def _settle_bookkeeper_lane(self) -> int:
        """Dispose of the batches the delete process has decided, oldest first."""
        lane = self.bookkeeper_lane
        if lane is None:
            return 0
        settled = 0
        batches = lane.finished()
        try:
            for batch in batches:
                if batch.with_offloads:  # its BookKeeper deletes are done; its offload deletes are in their lane
                    failpoint("delete.between-bookkeeper-and-offload")
                for d in batch.items:
                    d.take_back()
                settled += self._dispose_all(batch.items)
        finally:
            lane.disposed(len(batches))  # recorded: the next batch's deletes may go on
        return settled

    # ---- disposing

    def _dispose_all(self, decided: list[MessageInHand]) -> int:
        """Pause what an outage failed (``lifecycle.pauses``); the disposer carries the rest out.
        Returns how many were not paused."""
        # Probing costs a round trip to each store: only when an outage could explain a failure here.
        down = any(d.decided.transient for d in decided) and self.breakers.any_down()
        going_on = []
        for d in decided:
            if lifecycle.pauses(d.decided, down):
                d.pause()
                self._paused.append(d)
            else:
                going_on.append(d)
        if self._paused:
            self.metrics.on_hold.set(len(self._paused))
        self.disposer.dispose_all(going_on)
        return len(going_on)
