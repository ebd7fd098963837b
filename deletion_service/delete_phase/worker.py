"""The delete-phase consumer: receive a batch, run the pipeline, carry each message out of our hands.

Two consumers on the ``ledger-deletion`` subscription — the request
partitions and RETRY — so RETRY messages that are not yet due can be held
(the embedded broker ignores delayed delivery) without starving new requests.
Held messages are bounded (:mod:`.not_yet_due`) and so are their delays (a
message's ``DELAY_TIME`` is honoured, capped by config's longest delay).
Unacked messages return to the subscription when the worker stops, so
stopping at any point loses nothing.

Where a message stands and what it may do next is the lifecycle table
(:mod:`.lifecycle`); every verdict, including those met before any fact is
gathered, comes from :mod:`.decision`.  This module only does the I/O around
them: receive, publish the RETRY/DLQ copy, write the record (the audit trail,
before the ack, so no crash can ack a message whose record is lost), ack, and
tell each message's :class:`~.lifecycle.Disposal` what happened.  A message
settled here whose ack the broker lost comes back and is only acknowledged
again (:mod:`.settled_recently`).  A publish or ack the broker refuses leaves
the message waiting for its next try with backoff (the worker takes no new
messages while that list is full).  It is never dropped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from deletion_service.broker.interface import BrokerError, Consumer, Outgoing, Received
from deletion_service.delete_phase import decision, dispose, lifecycle
from deletion_service.delete_phase.ack_tally import AckTally
from deletion_service.delete_phase.breaker import Breakers
from deletion_service.delete_phase.decision import Action, Policy
from deletion_service.delete_phase.lifecycle import Disposal, Event, Stage, Step
from deletion_service.delete_phase.not_yet_due import NotYetDue
from deletion_service.delete_phase.offload_lane import OffloadLane
from deletion_service.delete_phase.outcomes import Outcome, outward
from deletion_service.delete_phase.pipeline import DeletePipeline
from deletion_service.delete_phase.settled_recently import SettledRecently
from deletion_service.failpoints import failpoint
from deletion_service.metrics import DeletionMetrics
from deletion_service.model import InvalidRequest, LedgerType, PendingDeleteLedgerInfo, decode
from deletion_service.publisher import RequestPublisher

_log = logging.getLogger(__name__)

#: A message whose disposition has failed for this long makes the daemon "not ready".
STUCK_AFTER_S = 60.0

#: Why a request may not be acted on from the topic it was read on (namespace scope), or None.
Guard = Callable[[Received, PendingDeleteLedgerInfo], str | None]


@dataclass
class Settled:
    """One message's end: what was decided and how it left our hands."""

    message: Received
    request: PendingDeleteLedgerInfo | None
    action: Action
    outcome: Outcome


@dataclass(frozen=True)
class Limits:
    """How much the worker keeps in hand, and how it paces failed dispositions."""

    batch_size: int = 100
    max_not_yet_due: int = 10_000  # RETRY messages held in memory until due
    max_awaiting_next_try: int = 1_000  # dispositions the broker refused, waiting for their next try
    dispose_backoff_s: float = 0.5  # doubled per failure, up to lifecycle.MAX_BACKOFF_S


@dataclass(frozen=True)
class Hooks:
    """What the service plugs in around a disposition."""

    #: before the ack (the audit trail): a crash may repeat a record, never lose one
    record: Callable[[Settled], None] | None = None
    #: after the ack
    on_settled: Callable[[Settled], None] | None = None
    #: namespace scope: why a request may not be acted on from the topic it was read on (cross-namespace)
    guard: Guard | None = None


@dataclass(frozen=True)
class InHand:
    """What the worker holds unacked, for ``/status``, ``/readyz`` and the periodic summary."""

    not_yet_due: int  # RETRY messages waiting for their delay to pass
    not_yet_due_until: float | None  # when the last of them falls due (Unix seconds)
    paused: int  # requests whose verification met a dependency outage, kept until it ends
    awaiting_next_try: int  # dispositions the broker refused (publish or ack), retried with backoff


class DeletePhaseWorker:
    """Drives each received message through :mod:`.lifecycle`: one thread owns every disposition."""

    def __init__(self, requests: Consumer, retries: Consumer, publisher: RequestPublisher,
                 pipeline: DeletePipeline, policy: Policy, metrics: DeletionMetrics,
                 limits: Limits = Limits(), hooks: Hooks = Hooks(), breakers: Breakers | None = None,
                 offload_lane: OffloadLane | None = None, clock: Callable[[], float] = time.time) -> None:
        self.requests, self.retries = requests, retries
        self.publisher, self.pipeline = publisher, pipeline
        self.policy, self.metrics, self.limits, self.hooks = policy, metrics, limits, hooks
        self.clock = clock
        self.breakers = breakers or Breakers()
        self.offload_lane = offload_lane
        self.last_message_at = 0.0
        self.acked = AckTally()  # what we acked lately: explains a stale backlog reading (--exit-when-idle)
        self.busy = False
        #: Set when the daemon stops: finish the batch in hand, retry nothing parked, take nothing new
        #: (what is left unacked returns to the subscription when the consumers close).
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._settled = SettledRecently()
        self._not_yet_due = NotYetDue()
        self._paused: list[Disposal] = []
        self._awaiting_next_try: list[Disposal] = []
        self._retry_paused_until = 0.0  # the RETRY consumer is not read until then (see _collect)
        self._handed_back_in_pass = 0
        self._reacked_in_pass = 0

    # ---- state the daemon reads (--exit-when-idle, /readyz, /status)

    def in_hand(self) -> InHand:
        until = self._not_yet_due.until_ms()
        return InHand(len(self._not_yet_due), until / 1000 if until is not None else None, len(self._paused),
                      len(self._awaiting_next_try))

    @property
    def idle(self) -> bool:
        return (not self.busy and not self._not_yet_due and not self._awaiting_next_try and not self._paused
                and (self.offload_lane is None or self.offload_lane.in_flight == 0))

    def dependencies_down(self) -> str | None:
        """For ``/readyz``: every open breaker (metadata stores, offload targets that answered before) and why."""
        lane = self.offload_lane.down() if self.offload_lane is not None else None
        return "; ".join(d for d in (self.breakers.down(), lane) if d) or None

    def stuck(self) -> str | None:
        """Why dispositions are failing, if one has kept failing for :data:`STUCK_AFTER_S`."""
        if not self._awaiting_next_try:
            return None
        waited = time.monotonic() - min(d.first_failure for d in self._awaiting_next_try)
        if waited < STUCK_AFTER_S:
            return None
        return (f"{len(self._awaiting_next_try)} message(s) cannot be published to RETRY/DLQ or acked; "
                f"the oldest for {waited:.0f}s")

    # ---- the loop

    def run(self, stop: threading.Event, poll_s: float = 0.2) -> None:
        while not stop.is_set():
            self.run_once(poll_s)

    def run_once(self, wait_s: float = 0.2) -> int:
        """Receive and process one batch; returns how many messages were settled."""
        with self._lock:
            if self.stopping.is_set():
                return 0
            self._try_again()
            if not self.breakers.ready():
                time.sleep(min(wait_s, 0.2))  # a dependency is down: take nothing, spend no retry
                return 0
            # Every message taken may end up waiting here: take no more than there is room for.
            room = min(self.limits.batch_size, self.limits.max_awaiting_next_try - len(self._awaiting_next_try))
            if room <= 0:
                time.sleep(min(wait_s, 0.2))  # full: take nothing new until the broker takes these
                return 0
            settled = self._settle_offloads()
            batch = self._resume_paused() or self._collect(wait_s, room)
            if not batch:
                return settled
            self.busy = True
            try:
                return self._process(batch)
            finally:
                self.busy = False

    def _resume_paused(self) -> list[Disposal]:
        """Held through an outage now over (the breakers let us here): theirs is the turn."""
        batch, self._paused = self._paused, []
        self.metrics.on_hold.set(0)
        for d in batch:
            d.resume()
        return batch

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _collect(self, wait_s: float, limit: int) -> list[Disposal]:
        """Due held messages first, then whatever both consumers have ready (1 ms polls, so a
        full batch costs no waiting); only an empty round waits, and only up to ``wait_s``."""
        batch = self._not_yet_due.pop_due(self._now_ms(), limit)
        for d in batch:
            d.advance(Event.FALL_DUE)
        deadline = time.monotonic() + wait_s
        retry_budget = self.limits.batch_size  # RETRY messages taken this pass: bounded even when all are held
        self._handed_back_in_pass = self._reacked_in_pass = 0
        while len(batch) < limit:
            got = False
            for consumer in (self.requests, self.retries):
                while len(batch) < limit:
                    if consumer is self.retries:
                        if retry_budget <= 0 or time.monotonic() < self._retry_paused_until:
                            break
                        retry_budget -= 1
                    msg = self._receive(consumer, 0.001)
                    if msg is None:
                        break
                    got = True
                    self._take(Disposal(msg, consumer), batch)
            if got:
                continue
            remaining = deadline - time.monotonic()
            if batch or remaining <= 0:
                break
            msg = self._receive(self.requests, min(0.05, remaining))  # idle: wait a little, not spin
            if msg is not None:
                self._take(Disposal(msg, self.requests), batch)
        self._after_collect()
        return batch

    def _after_collect(self) -> None:
        if self._handed_back_in_pass >= max(1, self.limits.batch_size // 2):
            # RETRY holds only messages due later than everything held: read it again in a second
            # rather than cycle its messages through the broker.
            self._retry_paused_until = time.monotonic() + 1.0
        if self._reacked_in_pass:
            _log.warning("%d redelivered message(s) had been settled here already (their acks were lost, "
                         "most likely with a broker that died): acknowledged again, not settled twice",
                         self._reacked_in_pass)

    def _take(self, d: Disposal, batch: list[Disposal]) -> None:
        self.last_message_at = time.monotonic()
        self.metrics.received.inc()
        if d.message in self._settled:
            self._ack_again(d)
            return
        now_ms = self._now_ms()
        if d.consumer is self.retries:
            d.due_ms = dispose.due_at_ms(d.message, self.policy.max_delay_s, now_ms)
        if d.due_ms <= now_ms:
            batch.append(d)
            return
        d.advance(Event.HOLD_UNTIL_DUE)
        self._not_yet_due.add(d)
        if len(self._not_yet_due) > self.limits.max_not_yet_due:
            self._hand_back_latest(now_ms, d)

    def _ack_again(self, d: Disposal) -> None:
        """A message settled here came back: its ack was lost.  Only the ack is owed (if this one is
        lost too, the broker redelivers it once more)."""
        try:
            d.consumer.ack(d.message)
        except BrokerError as e:
            _log.debug("re-acking %s failed (%s): it comes back", d.message.message_id, e)
            d.advance(Event.LEAVE_UNACKED)
            return
        d.advance(Event.ACK_AGAIN)
        self.acked.record(d.message.topic)
        self.metrics.ack_lost.inc()
        self._reacked_in_pass += 1

    def _hand_back_latest(self, now_ms: int, newest: Disposal) -> None:
        """The not-yet-due set is full: the message due last goes back to RETRY with the delay it has left."""
        d = self._not_yet_due.latest()
        try:
            dispose.hand_back_to_retry(self.publisher, d.message, (d.due_ms - now_ms) / 1000)
            self.retries.ack(d.message)
        except BrokerError as e:
            _log.warning("not-yet-due set full and RETRY refused a message handed back (%s); holding it", e)
            return
        d.advance(Event.HAND_BACK)
        self.acked.record(d.message.topic)
        self._settled.add(d.message)  # its ack lost, its redelivery is only acked: one RETRY copy is enough
        self._not_yet_due.remove(d)
        if d is newest:
            self._handed_back_in_pass += 1

    def _receive(self, consumer: Consumer, timeout_s: float) -> Received | None:
        try:
            return consumer.receive(timeout_s)
        except BrokerError as e:
            _log.warning("receive failed: %s", e)
            time.sleep(min(1.0, timeout_s))
            return None

    # ---- deciding

    def _process(self, batch: list[Disposal]) -> int:
        undecided = [d for d in batch if not self._admit(d)]
        to_pipeline, in_lane = self._to_offload_lane(undecided)
        if to_pipeline:
            actions = self.pipeline.run([self._request(d) for d in to_pipeline],
                                        [dispose.attempts(d.message) for d in to_pipeline], self.policy,
                                        [dispose.grace_since(d.message) for d in to_pipeline])
            for d, action in zip(to_pipeline, actions, strict=True):
                d.decide(action)
        if in_lane:  # this batch's BookKeeper deletes are done; its offload deletes wait in their lane
            failpoint("delete.between-bookkeeper-and-offload")
        return self._dispose_all([d for d in batch if d.stage == Stage.DECIDED])

    def _admit(self, d: Disposal) -> bool:
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

    @staticmethod
    def _request(d: Disposal) -> PendingDeleteLedgerInfo:
        assert d.request is not None, "only admitted messages reach the pipeline"
        return d.request

    def _to_offload_lane(self, undecided: list[Disposal]) -> tuple[list[Disposal], list[Disposal]]:
        """Offload requests go to their own lane (:mod:`.offload_lane`), so S3 never holds up a
        BookKeeper deletion; those beyond its room are decided here (``decision.offload_lane_full``).
        Returns what the pipeline decides now, and what went to the lane."""
        lane = self.offload_lane
        offloads = [d for d in undecided if self._request(d).ledger_type == LedgerType.OFFLOAD_LEDGER] \
            if lane is not None else []
        if lane is None or not offloads:
            return undecided, []
        room = lane.room()
        taken, over = offloads[:room], offloads[room:]
        for d in taken:
            d.advance(Event.SEND_TO_LANE)
        lane.submit(taken)
        for d in over:
            d.decide(decision.offload_lane_full(self.policy))
        return [d for d in undecided if d.stage == Stage.RECEIVED], taken

    def _settle_offloads(self) -> int:
        """Dispose of the offload requests the lane has decided (this thread owns every disposition)."""
        done = self.offload_lane.finished() if self.offload_lane is not None else []
        self._dispose_all(done)
        return len(done)

    # ---- disposing: the I/O around each lifecycle step

    def _dispose_all(self, decided: list[Disposal]) -> int:
        """Pause what an outage failed, publish the batch's copies together, then carry each on alone;
        returns how many were not paused."""
        down = self.breakers.any_down()
        going_on = []
        for d in decided:
            if lifecycle.pauses(d.decided, down):
                d.pause()
                self._paused.append(d)
            else:
                going_on.append(d)
        if self._paused:
            self.metrics.on_hold.set(len(self._paused))
        refused = self._publish_copies(going_on)
        for d in going_on:
            if d not in refused:  # a copy the broker refused already waits for its next try
                self._dispose(d)
        return len(going_on)

    def _publish_copies(self, decided: list[Disposal]) -> set[Disposal]:
        """The batch's RETRY and DLQ copies, pipelined (one round trip per window, not per message).
        A copy refused by the broker leaves its message waiting for its next try; a copy that cannot
        be built, or a batch the client fails outright, is left to :meth:`_dispose`, one by one.
        Returns the messages whose copy the broker refused."""
        copies: dict[Step, list[tuple[Disposal, Outgoing]]] = {Step.PUBLISH_RETRY_COPY: [], Step.PUBLISH_DLQ_COPY: []}
        refused: set[Disposal] = set()
        for d in decided:
            if d.next in copies:
                try:
                    copies[d.next].append((d, self._copy_of(d)))
                except Exception:  # noqa: BLE001 - _dispose meets the same error and handles it
                    continue
        for step, send in ((Step.PUBLISH_RETRY_COPY, self.publisher.send_retries),
                           (Step.PUBLISH_DLQ_COPY, self.publisher.send_dead_letters)):
            items = copies[step]
            if not items:
                continue
            try:
                receipts = send([copy for _, copy in items])
                if len(receipts) != len(items):
                    raise BrokerError(f"{len(receipts)} receipts for {len(items)} copies")
            except Exception:  # noqa: BLE001 - the one-by-one path decides for each message
                _log.exception("publishing %d copies (%s) failed; publishing them one by one", len(items), step)
                continue
            errors = []
            for (d, _), receipt in zip(items, receipts, strict=True):
                if isinstance(receipt, BrokerError):
                    self._try_later(d, str(receipt), quiet=True)
                    refused.add(d)
                    errors.append(receipt)
                else:
                    self._copy_published(d)
            if errors:  # one line for the batch: a refusing broker refuses every copy alike
                _log.warning("could not %s for %d message(s) (%s): will retry", step, len(errors), errors[0])
        return refused

    def _copy_of(self, d: Disposal) -> Outgoing:
        action = d.decided
        if d.next == Step.PUBLISH_RETRY_COPY:
            return dispose.retry_copy(d.message, action.delay_s, counts=action.counts,
                                      grace_since_ms=action.grace_since_ms)
        reason = outward(action).dlq_reason
        assert reason is not None, "a dead letter's outward form names its reason"
        return dispose.dead_letter_copy(d.message, reason, action.reason, undecodable=d.undecodable)

    def _copy_published(self, d: Disposal) -> None:
        """Its copy is receipted: a failed ack later must not publish it twice."""
        failpoint("retry.after-publish" if d.next == Step.PUBLISH_RETRY_COPY else "dlq.after-publish")
        d.advance(Event.PUBLISH_COPY)
        if d.decided.kind == decision.Kind.MAX_RETRIES:
            self.metrics.max_retry_reached.inc()

    def _dispose(self, d: Disposal) -> None:
        """Carry ``d`` through its remaining steps; a failure leaves it at its stage for its next try."""
        while True:
            try:
                self._run_steps(d)
                break
            except BrokerError as e:
                self._try_later(d, str(e))
                return
            except Exception as e:  # noqa: BLE001 - e.g. a delay the client cannot represent
                _log.exception("disposing of %s failed", d.message.message_id)
                why = f"{type(e).__name__}: {e}"
                if lifecycle.on_unexpected_error(d) != Event.REDECIDE:
                    self._try_later(d, why)
                    return
                # a dead letter is never redecided: at most one more pass
                d.redecide(decision.could_not_reconsume(d.decided, why))
        if d.stage == Stage.ACKED:
            self._settled_here(d)

    def _run_steps(self, d: Disposal) -> None:
        while (step := d.next) != Step.NOTHING:
            match step:
                case Step.PUBLISH_RETRY_COPY:
                    copy = self._copy_of(d)
                    self.publisher.send_retry(copy.data, copy.properties, copy.deliver_after_s, copy.source_topic)
                    self._copy_published(d)
                case Step.PUBLISH_DLQ_COPY:
                    copy = self._copy_of(d)
                    self.publisher.send_dlq(copy.data, copy.properties, copy.source_topic)
                    self._copy_published(d)
                case Step.RECORD:
                    if self.hooks.record is not None:
                        self.hooks.record(self._settlement(d))
                    d.advance(Event.RECORD)
                case Step.ACK:
                    failpoint("delete.before-ack")
                    d.consumer.ack(d.message)
                    d.advance(Event.ACK)
                    self.acked.record(d.message.topic)
                case Step.LEAVE_UNACKED:
                    action = d.decided
                    _log.info("%s", action.reason if d.request is None else f"{d.request.describe()}: {action.reason}")
                    d.advance(Event.LEAVE_UNACKED)  # the subscription redelivers it to a real run

    def _settlement(self, d: Disposal) -> Settled:
        return Settled(d.message, d.request, d.decided, outward(d.decided).outcome)

    def _settled_here(self, d: Disposal) -> None:
        settled = self._settlement(d)
        self._settled.add(d.message)
        self.metrics.acked.labels(outcome=settled.outcome.value).inc()
        if settled.outcome == Outcome.DELETED and d.request is not None:
            self.metrics.send_to_delete.observe(max(0.0, self.clock() - d.request.marked_at / 1000))
        self._log_outcome(d)
        if self.hooks.on_settled is not None:
            self.hooks.on_settled(settled)

    def _try_later(self, d: Disposal, why: str, quiet: bool = False) -> None:
        d.fail(time.monotonic(), self.limits.dispose_backoff_s)
        self.metrics.dispose_failures.inc()
        if not quiet:
            _log.warning("could not dispose of %s (%s): will retry", d.message.message_id, why)
        self._awaiting_next_try.append(d)
        self.metrics.undisposed.set(len(self._awaiting_next_try))

    def _try_again(self) -> None:
        """Dispositions whose backoff has passed get their next try."""
        now = time.monotonic()
        due = [d for d in self._awaiting_next_try if d.next_try <= now]
        if not due:
            return
        self._awaiting_next_try = [d for d in self._awaiting_next_try if d.next_try > now]
        for d in due:
            self._dispose(d)
        self.metrics.undisposed.set(len(self._awaiting_next_try))

    def _log_outcome(self, d: Disposal) -> None:
        action, out = d.decided, outward(d.decided)
        what = d.request.describe() if d.request else f"message {d.message.message_id}"
        fields = {"outcome": out.outcome.value, "reason": action.reason, "messageId": d.message.message_id,
                  "attempts": dispose.attempts(d.message)}
        if d.request is not None:
            fields.update(ledger=d.request.ledger_id, ledgerType=d.request.ledger_type.value,
                          topic=d.request.topic_name)
        # "deleted (deleted)" said it twice: the reason only when it adds something
        detail = "" if action.reason in (out.outcome.value, "deleted", "absent") else f" ({action.reason})"
        _log.log(out.log_level, "%s: %s%s", what, out.outcome.value, detail, extra=fields)
