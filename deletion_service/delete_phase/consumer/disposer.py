"""Carrying decided messages out of our hands: the I/O of each lifecycle step, in the table's order.

A reconsume or a dead letter publishes its copy first and is acked only after
the broker's receipt, so a crash in between duplicates a request (harmless:
deletion is idempotent) and never loses one.  Its record (``Hooks.record``, the
audit trail) is written before its ack, so no crash can ack a message whose
record is lost.  A batch's records are written together (one append to the
trail) before any of its messages is acked; then each message is disposed of on its own: if the broker refuses
its publish or ack, it keeps its stage (a copy is never published twice, a
record never written twice) and waits in a bounded list for its next try with
backoff.  It is never dropped.

What an operator reads of each settled request is :mod:`.outcome_lines`'s.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from deletion_service.broker.interface import BrokerError, Outgoing, Received, display_message_id
from deletion_service.broker.publisher import CopyPublisher
from deletion_service.delete_phase.consumer import copies as dispose
from deletion_service.delete_phase.consumer.ack_tally import AckTally
from deletion_service.delete_phase.consumer.intake import Limits
from deletion_service.delete_phase.consumer.outcome_lines import OutcomeLines
from deletion_service.delete_phase.consumer.settled_recently import SettledRecently
from deletion_service.delete_phase.rules import decision, lifecycle
from deletion_service.delete_phase.rules.decision import Action
from deletion_service.delete_phase.rules.lifecycle import Event, IllegalTransition, MessageInHand, Stage, Step
from deletion_service.delete_phase.rules.outward import outward
from deletion_service.delete_phase.rules.seal import Seal
from deletion_service.failpoints import failpoint
from deletion_service.metrics import DeletionMetrics
from deletion_service.protocol.fate import Outcome
from deletion_service.protocol.request import PendingDeleteLedgerInfo

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


class RecordsNotWritten(OSError):
    """Raised by the ``record`` hook when the audit trail refused records (a full disk, a read-only volume,
    its lock held elsewhere): the first ``written`` were written, the others' messages stay unacked and are
    recorded on their next try.  Were the records only logged, the daemon would go on
    deleting batch after batch that its trail never named."""

    def __init__(self, written: int, why: str) -> None:
        super().__init__(why)
        self.written = written


@dataclass
class Hooks:
    """What the service plugs in around a disposition: one object the worker and its disposer share,
    so a hook set on ``worker.hooks`` after start (a test's observer) is the one that runs."""

    #: before the acks (the audit trail), a batch's settlements at once: a crash may repeat a record,
    #: never lose one
    record: Callable[[Sequence[Settled]], None] | None = None
    #: after the ack
    on_settled: Callable[[Settled], None] | None = None
    #: namespace scope: why a request may not be acted on from the topic it was read on (cross-namespace)
    guard: Guard | None = None


class Disposer:
    """Publishes, records and acks decided messages; keeps those the broker refused for their next try."""

    def __init__(self, publisher: CopyPublisher, metrics: DeletionMetrics, limits: Limits, hooks: Hooks,
                 settled: SettledRecently, acked: AckTally, clock: Callable[[], float] = time.time,
                 seal: Seal | None = None) -> None:
        self.publisher, self.metrics, self.limits, self.hooks = publisher, metrics, limits, hooks
        self.seal = seal  # seals what each copy says of this tool's work (``rules.seal``)
        self.settled_recently, self.ack_tally, self.clock = settled, acked, clock
        self.awaiting_next_try: list[MessageInHand] = []
        #: settled in the current call, by outcome: the ``acked`` metric counts them once per call
        self._settled_by_outcome: Counter[Outcome] = Counter()
        #: acked in the current call, by topic: told to the ack tally once per call
        self._acked_topics: Counter[str] = Counter()
        self.lines = OutcomeLines()  # what the log says of each settled request (see :mod:`.outcome_lines`)
        #: the messages the current call carries on (a refused record among them is seen before it waits)
        self._in_pass: list[MessageInHand] = []
        self._refused_why = "the audit trail refused records"  # what the trail said when it last refused

    def trail_refused(self) -> str | None:
        """Why nothing more may be deleted, while a message in hand waits at ``RECORD_REFUSED`` (see
        :func:`.lifecycle.trail_refused`); None once the trail has taken every refused record."""
        if lifecycle.trail_refused(itertools.chain(self.awaiting_next_try, self._in_pass)):
            return self._refused_why
        return None

    def stuck(self) -> str | None:
        """Why dispositions are failing, if one has kept failing for :data:`STUCK_AFTER_S`."""
        if not self.awaiting_next_try:
            return None
        waited = time.monotonic() - min(d.first_failure for d in self.awaiting_next_try)
        if waited < STUCK_AFTER_S:
            return None
        return (f"{len(self.awaiting_next_try)} message(s) cannot be published to RETRY/DLQ or acked; "
                f"the oldest for {waited:.0f}s")

    def dispose_all(self, decided: list[MessageInHand]) -> None:
        """Publish the batch's copies together, record the batch together, then carry each message on alone."""
        self._in_pass = decided  # a record refused in the pass closes the gate before it joins the waiting list
        try:
            refused = self._publish_copies(decided)
            going_on = [d for d in decided if d not in refused]  # a refused copy already waits for its next try
            unrecorded = self._record_all([d for d in going_on if d.next == Step.RECORD])
            going_on = [d for d in going_on if d not in unrecorded]  # they too wait for their next try
            for d in going_on:
                self._dispose(d)
        finally:
            self._in_pass = []
            self._end_of_call()

    def try_again(self) -> None:
        """Dispositions whose backoff has passed get their next try."""
        now = time.monotonic()
        due = [d for d in self.awaiting_next_try if d.next_try <= now]
        if not due:
            return
        self._in_pass = due  # first: a refused record among them keeps the gate closed while they are tried
        self.awaiting_next_try = [d for d in self.awaiting_next_try if d.next_try > now]
        try:
            refused = self._record_all([d for d in due if d.next == Step.RECORD])  # one try of the trail in all
            for d in due:
                if d not in refused:
                    self._dispose(d)
        finally:
            self._in_pass = []
            self._end_of_call()
        self.metrics.undisposed.set(len(self.awaiting_next_try))

    def _publish_copies(self, decided: list[MessageInHand]) -> set[MessageInHand]:
        """The batch's RETRY and DLQ copies, pipelined (one round trip per window, not per message).
        A copy refused by the broker leaves its message waiting for its next try; a copy that cannot
        be built, or a batch the client fails outright, is left to :meth:`_dispose`, one by one.
        Returns the messages whose copy the broker refused."""
        copies: dict[Step, list[tuple[MessageInHand, Outgoing]]] = {
            Step.PUBLISH_RETRY_COPY: [], Step.PUBLISH_DLQ_COPY: []}
        refused: set[MessageInHand] = set()
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

    def _record_all(self, due: list[MessageInHand]) -> set[MessageInHand]:
        """The records of every message whose next step is its record, in one call of the hook; returns
        those the trail refused (each waits for its next try).  If the hook fails otherwise, nothing is
        marked recorded: :meth:`_dispose` then records each message on its own."""
        if not due:
            return set()
        if self.hooks.record is not None:
            try:
                self.hooks.record([self._settlement(d) for d in due])
            except RecordsNotWritten as e:
                for d in due[:e.written]:
                    d.advance(Event.RECORD)
                for d in due[e.written:]:
                    self._not_recorded(d, e)
                return set(due[e.written:])
            except Exception:  # noqa: BLE001 - the one-by-one path meets it again and handles it per message
                _log.exception("recording %d settlements failed; recording them one by one", len(due))
                return set()
            self._trail_takes_records()
        for d in due:
            d.advance(Event.RECORD)
        return set()

    def _not_recorded(self, d: MessageInHand, e: RecordsNotWritten) -> None:
        self._refused_why = str(e)
        if d.stage != Stage.RECORD_REFUSED:
            d.refuse_record()
        self._try_later(d, str(e), quiet=True)  # the hook said it once for the batch

    def _trail_takes_records(self) -> None:
        """The trail wrote a record: the records it refused before are tried at the next pass, not after
        their backoff, so the gate they close opens as soon as the trail can take them."""
        now = time.monotonic()
        for d in self.awaiting_next_try:
            if d.stage == Stage.RECORD_REFUSED:
                d.next_try = min(d.next_try, now)

    def _copy_of(self, d: MessageInHand) -> Outgoing:
        action = d.decided
        if d.next == Step.PUBLISH_RETRY_COPY:
            return dispose.retry_copy(d.message, action.delay_s, counts=action.counts,
                                      grace_since_ms=action.grace_since_ms, kind=action.kind, why=action.reason,
                                      seal=self.seal)
        reason = outward(action).dlq_reason
        assert reason is not None, "a dead letter's outward form names its reason"
        return dispose.dead_letter_copy(d.message, reason, action.reason, undecodable=d.undecodable, seal=self.seal)

    def _copy_published(self, d: MessageInHand) -> None:
        """Its copy is receipted: a failed ack later must not publish it twice."""
        failpoint("retry.after-publish" if d.next == Step.PUBLISH_RETRY_COPY else "dlq.after-publish")
        d.advance(Event.PUBLISH_COPY)
        if d.decided.kind == decision.Kind.MAX_RETRIES:
            self.metrics.max_retry_reached.inc()

    def _dispose(self, d: MessageInHand) -> None:
        """Carry ``d`` through its remaining steps; a failure leaves it at its stage for its next try."""
        if d.done:  # a driver bug (it would be counted, audited and reported settled twice): say so loudly
            raise IllegalTransition(f"{d.message.message_id} is disposed of already ({d.stage})")
        while True:
            try:
                self._run_steps(d)
                break
            except BrokerError as e:
                self._try_later(d, str(e))
                return
            except RecordsNotWritten as e:
                self._not_recorded(d, e)
                return
            except Exception as e:  # noqa: BLE001 - e.g. a delay the client cannot represent
                _log.exception("disposing of %s failed", display_message_id(d.message.message_id))
                why = f"{type(e).__name__}: {e}"
                if lifecycle.on_unexpected_error(d) != Event.REDECIDE:
                    self._try_later(d, why)
                    return
                # a dead letter is never redecided: at most one more pass
                d.redecide(decision.could_not_reconsume(d.decided, why))
        if d.stage == Stage.ACKED:
            self._settled_here(d)

    def _run_steps(self, d: MessageInHand) -> None:
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
                        # one try of the trail a pass, not one a message: a record refused in hand says no
                        if (why := self.trail_refused()) is not None:
                            raise RecordsNotWritten(0, why)
                        self.hooks.record([self._settlement(d)])
                        self._trail_takes_records()
                    d.advance(Event.RECORD)
                case Step.ACK:
                    failpoint("delete.before-ack")
                    d.consumer.ack(d.message)
                    d.advance(Event.ACK)
                    self._acked_topics[d.message.topic] += 1
                case Step.LEAVE_UNACKED:
                    action = d.decided
                    _log.info("%s", action.reason if d.request is None else f"{d.request.describe()}: {action.reason}")
                    d.advance(Event.LEAVE_UNACKED)  # the subscription redelivers it to a real run

    def _settlement(self, d: MessageInHand) -> Settled:
        return Settled(d.message, d.request, d.decided, outward(d.decided).outcome)

    def _settled_here(self, d: MessageInHand) -> None:
        out = outward(d.decided)
        settled = Settled(d.message, d.request, d.decided, out.outcome)
        self.settled_recently.add(d.message)
        self._settled_by_outcome[out.outcome] += 1
        if out.outcome == Outcome.DELETED and d.request is not None:
            self.metrics.send_to_delete.observe(max(0.0, self.clock() - d.request.marked_at / 1000))
        self.lines.add(d, out)
        if self.hooks.on_settled is not None:
            self.hooks.on_settled(settled)

    def _end_of_call(self) -> None:
        """What is tallied per call, not per message: the ``acked`` metric, the ack tally and the routine
        outcomes' lines."""
        self.metrics.count_acked(self._settled_by_outcome)
        self._settled_by_outcome.clear()
        for topic, n in self._acked_topics.items():
            self.ack_tally.record(topic, n)
        self._acked_topics.clear()
        self.lines.flush()

    def _try_later(self, d: MessageInHand, why: str, quiet: bool = False) -> None:
        d.fail(time.monotonic(), self.limits.dispose_backoff_s)
        self.metrics.dispose_failures.inc()
        if not quiet:
            _log.warning("could not dispose of %s (%s): will retry", display_message_id(d.message.message_id), why)
        self.awaiting_next_try.append(d)
        self.metrics.undisposed.set(len(self.awaiting_next_try))
