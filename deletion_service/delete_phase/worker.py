"""The delete-phase consumer: receive a batch, run the pipeline, dispose of each message.

Two consumers on the ``ledger-deletion`` subscription — the request
partitions and RETRY — so RETRY messages that are not yet due can be held
(the embedded broker ignores delayed delivery) without starving new requests.
Held messages are bounded and so are their delays (a message's
``DELAY_TIME`` capped by config's longest delay); when the held set is full, a message due sooner
takes the place of the one due last, which goes back to RETRY with the delay
it has left, so a flood of far-future messages cannot keep a due one waiting.
Unacked messages return to the subscription when the worker stops, so
stopping at any point loses nothing.

Every received message ends in exactly one of: ack (deleted, absent, still in
use, mismatch), reconsume (RETRY, then ack), or DLQ (then ack).  Its record
(``record``, the audit trail) is written before its ack, so no crash can ack a
message whose record is lost; a message settled here whose ack the broker lost
(it died first) comes back and is only acknowledged again (:mod:`.settled_recently`).  Each message
is disposed of on its own: if the broker refuses its publish or ack, it waits
in a bounded ``_undisposed`` list and is retried with backoff (the worker
takes no new messages while that list is full); any other error while
disposing turns it into a dead letter with the reason.  It is never dropped.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from deletion_service.broker.interface import BrokerError, Consumer, Outgoing, Received
from deletion_service.delete_phase import decision, dispose
from deletion_service.delete_phase.ack_tally import AckTally
from deletion_service.delete_phase.breaker import Breakers
from deletion_service.delete_phase.decision import Action, Kind, Outcome, Policy, Verdict
from deletion_service.delete_phase.offload_lane import OffloadLane
from deletion_service.delete_phase.pipeline import DeletePipeline
from deletion_service.delete_phase.settled_recently import SettledRecently
from deletion_service.failpoints import failpoint
from deletion_service.metrics import DeletionMetrics
from deletion_service.model import InvalidRequest, LedgerType, PendingDeleteLedgerInfo, decode
from deletion_service.publisher import RequestPublisher

_log = logging.getLogger(__name__)

#: Verdicts that publish a copy (to RETRY, to the DLQ) before the original is acked.
_COPIED = (Verdict.RECONSUME, Verdict.DLQ)

#: A message whose disposition has failed for this long makes the daemon "not ready".
STUCK_AFTER_S = 60.0


@dataclass
class Settled:
    """One message's end: what was decided and how it left our hands."""

    message: Received
    request: PendingDeleteLedgerInfo | None
    action: Action
    outcome: Outcome


@dataclass
class _Pending:
    message: Received
    consumer: Consumer
    action: Action
    request: PendingDeleteLedgerInfo | None
    undecodable: bool = False
    published: bool = False  # its RETRY/DLQ copy is receipted: a failed ack must not publish it twice
    recorded: bool = False  # its record is written: a failed ack must not write it twice
    failures: int = 0
    next_try: float = 0.0  # monotonic
    first_failure: float = 0.0  # monotonic


class DeletePhaseWorker:
    def __init__(
        self,
        requests: Consumer,
        retries: Consumer,
        publisher: RequestPublisher,
        pipeline: DeletePipeline,
        policy: Policy,
        metrics: DeletionMetrics,
        batch_size: int = 100,
        max_held: int = 10_000,
        max_undisposed: int = 1_000,
        dispose_backoff_s: float = 0.5,
        clock: Callable[[], float] = time.time,
        on_settled: Callable[[Settled], None] | None = None,
        record: Callable[[Settled], None] | None = None,
        breakers: Breakers | None = None,
        offload_lane: OffloadLane | None = None,
        guard: Callable[[Received, PendingDeleteLedgerInfo], str | None] | None = None,
    ) -> None:
        self.requests, self.retries = requests, retries
        self.publisher, self.pipeline = publisher, pipeline
        self.policy, self.metrics = policy, metrics
        self.batch_size, self.max_held, self.max_undisposed = batch_size, max_held, max_undisposed
        self.dispose_backoff_s = dispose_backoff_s  # doubled per failure, up to 30 s
        self.clock = clock
        self.on_settled = on_settled  # after the ack
        self.record = record  # before the ack (the audit trail): a crash may repeat a record, never lose one
        self._settled = SettledRecently()
        self._reacked_in_pass = 0
        self._held: list[tuple[int, int, Received]] = []  # (due ms, seq, message) from RETRY
        self._seq = itertools.count()
        self._undisposed: list[_Pending] = []
        self._retry_paused_until = 0.0
        self._deferred_in_pass = 0
        self.last_message_at = 0.0
        self.acked = AckTally()  # what we acked lately: explains a stale backlog reading (--exit-when-idle)
        self.busy = False
        self._lock = threading.Lock()
        self.breakers = breakers or Breakers()
        #: Set when the daemon stops: finish the batch in hand, retry nothing parked, take nothing new
        #: (what is left unacked returns to the subscription when the consumers close).
        self.stopping = threading.Event()
        self.offload_lane = offload_lane
        #: namespace scope: why a request may not be acted on from the topic it was read on (cross-namespace)
        self.guard = guard
        #: Requests whose verification met a dependency outage: kept in hand, unacked, until it ends.
        self._on_hold: list[tuple[Received, Consumer]] = []

    # ---- state the daemon reads (--exit-when-idle, /readyz)

    @property
    def held(self) -> int:
        return len(self._held)

    @property
    def idle(self) -> bool:
        return (not self.busy and not self._held and not self._undisposed and not self._on_hold
                and (self.offload_lane is None or self.offload_lane.in_flight == 0))

    @property
    def on_hold(self) -> int:
        return len(self._on_hold)

    @property
    def undisposed(self) -> int:
        return len(self._undisposed)

    def held_until(self) -> float | None:
        """When the last RETRY message held in memory falls due (Unix seconds), if any is held."""
        return max(due for due, _, _ in self._held) / 1000 if self._held else None

    def dependencies_down(self) -> str | None:
        """For ``/readyz``: every open breaker (metadata stores, offload targets that answered before) and why."""
        lane = self.offload_lane.down() if self.offload_lane is not None else None
        return "; ".join(d for d in (self.breakers.down(), lane) if d) or None

    def stuck(self) -> str | None:
        """Why dispositions are failing, if one has kept failing for :data:`STUCK_AFTER_S`."""
        if not self._undisposed:
            return None
        oldest = min(p.first_failure for p in self._undisposed)
        waited = time.monotonic() - oldest
        if waited < STUCK_AFTER_S:
            return None
        return (f"{len(self._undisposed)} message(s) cannot be published to RETRY/DLQ or acked; "
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
            self._retry_undisposed()
            if not self.breakers.ready():
                time.sleep(min(wait_s, 0.2))  # a dependency is down: take nothing, spend no retry
                return 0
            # Every message taken may end up waiting here: take no more than there is room for.
            room = min(self.batch_size, self.max_undisposed - len(self._undisposed))
            if room <= 0:
                time.sleep(min(wait_s, 0.2))  # full: take nothing new until the broker takes these
                return 0
            settled = self._settle_offloads()
            batch, self._on_hold = self._on_hold, []  # held through an outage now over: theirs is the turn
            self.metrics.on_hold.set(0)
            if not batch:
                batch = self._collect(wait_s, room)
            if not batch:
                return settled
            self.busy = True
            try:
                return self._process(batch)
            finally:
                self.busy = False

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _collect(self, wait_s: float, limit: int) -> list[tuple[Received, Consumer]]:
        """Due held messages first, then whatever both consumers have ready (1 ms polls, so a
        full batch costs no waiting); only an empty round waits, and only up to ``wait_s``."""
        batch: list[tuple[Received, Consumer]] = []
        now_ms = self._now_ms()
        while self._held and self._held[0][0] <= now_ms and len(batch) < limit:
            batch.append((heapq.heappop(self._held)[2], self.retries))
        deadline = time.monotonic() + wait_s
        retry_budget = self.batch_size  # RETRY messages taken this pass: bounded even when all are held
        self._deferred_in_pass = self._reacked_in_pass = 0
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
                    self._take(msg, consumer, batch)
            if got:
                continue
            remaining = deadline - time.monotonic()
            if batch or remaining <= 0:
                break
            msg = self._receive(self.requests, min(0.05, remaining))  # idle: wait a little, not spin
            if msg is not None:
                self._take(msg, self.requests, batch)
        if self._deferred_in_pass >= max(1, self.batch_size // 2):
            # RETRY holds only messages due later than everything held: read it again in a second
            # rather than cycle its messages through the broker.
            self._retry_paused_until = time.monotonic() + 1.0
        if self._reacked_in_pass:
            _log.warning("%d redelivered message(s) had been settled here already (their acks were lost, "
                         "most likely with a broker that died): acknowledged again, not settled twice",
                         self._reacked_in_pass)
        return batch

    def _take(self, msg: Received, consumer: Consumer, batch: list[tuple[Received, Consumer]]) -> None:
        self.last_message_at = time.monotonic()
        self.metrics.received.inc()
        if msg in self._settled:
            self._ack_again(msg, consumer)
            return
        now_ms = self._now_ms()
        due = dispose.due_at_ms(msg, self.policy.max_delay_s, now_ms) if consumer is self.retries else 0
        if due <= now_ms:
            batch.append((msg, consumer))
            return
        seq = next(self._seq)
        heapq.heappush(self._held, (due, seq, msg))
        if len(self._held) > self.max_held:
            self._evict_latest(now_ms, seq)

    def _ack_again(self, msg: Received, consumer: Consumer) -> None:
        """A message settled here came back: its ack was lost.  Only the ack is owed (if this one is
        lost too, the broker redelivers it once more)."""
        try:
            consumer.ack(msg)
        except BrokerError as e:
            _log.debug("re-acking %s failed (%s): it comes back", msg.message_id, e)
            return
        self.acked.record(msg.topic)
        self.metrics.ack_lost.inc()
        self._reacked_in_pass += 1

    def _evict_latest(self, now_ms: int, newest_seq: int) -> None:
        """The held set is full: the message due last goes back to RETRY with the delay it has left."""
        latest = max(self._held)
        due, seq, msg = latest
        try:
            dispose.publish_deferred(self.publisher, msg, (due - now_ms) / 1000)
            self.retries.ack(msg)
            self.acked.record(msg.topic)
            self._settled.add(msg)  # its ack lost, its redelivery is only acked: one RETRY copy is enough
        except BrokerError as e:
            _log.warning("held set full and RETRY refused a deferred message (%s); holding it", e)
            return
        self._held.remove(latest)
        heapq.heapify(self._held)
        if seq == newest_seq:
            self._deferred_in_pass += 1

    def _receive(self, consumer: Consumer, timeout_s: float) -> Received | None:
        try:
            return consumer.receive(timeout_s)
        except BrokerError as e:
            _log.warning("receive failed: %s", e)
            time.sleep(min(1.0, timeout_s))
            return None

    def _process(self, batch: list[tuple[Received, Consumer]]) -> int:
        pending: list[_Pending] = []
        valid: list[tuple[_Pending, PendingDeleteLedgerInfo]] = []
        for msg, consumer in batch:
            try:
                request = decode(msg.data)
            except InvalidRequest as e:
                pending.append(_Pending(msg, consumer, decision.invalid(str(e)), None, undecodable=True))
                continue
            except Exception as e:  # noqa: BLE001 - decode promises InvalidRequest only; never trust it with a batch
                pending.append(_Pending(msg, consumer, decision.invalid(f"{type(e).__name__}: {e}"), None,
                                        undecodable=True))
                continue
            refused = self.guard(msg, request) if self.guard is not None else None
            if refused is not None:
                pending.append(_Pending(msg, consumer, Action(Verdict.DLQ, refused, kind=Kind.CROSS_NAMESPACE),
                                        request))
                continue
            p = _Pending(msg, consumer, Action(Verdict.RECONSUME, "undecided"), request)
            pending.append(p)
            valid.append((p, request))
        valid, in_lane = self._to_offload_lane(valid)
        if in_lane:
            pending = [p for p in pending if id(p) not in in_lane]  # the lane decides them; settled later
        if valid:
            tries = [dispose.attempts(p.message) for p, _ in valid]
            actions = self.pipeline.run([r for _, r in valid], tries, self.policy,
                                        [dispose.grace_since(p.message) for p, _ in valid])
            for (p, _), action in zip(valid, actions, strict=True):
                p.action = action
        if in_lane:  # this batch's BookKeeper deletes are done; its offload deletes wait in their lane
            failpoint("delete.between-bookkeeper-and-offload")
        pending = self._hold_if_down(pending)
        deferred = self._publish_copies(pending)
        for p in pending:
            if id(p) not in deferred:
                self._dispose(p)
        return len(pending)

    def _to_offload_lane(self, valid: list[tuple[_Pending, PendingDeleteLedgerInfo]]
                         ) -> tuple[list[tuple[_Pending, PendingDeleteLedgerInfo]], set[int]]:
        """Offload requests go to their own lane (:mod:`.offload_lane`), so S3 never holds up a
        BookKeeper deletion; those beyond its room go back to RETRY, their attempts unchanged."""
        lane = self.offload_lane
        offloads = [p for p, r in valid if r.ledger_type == LedgerType.OFFLOAD_LEDGER] if lane else []
        if lane is None or not offloads:
            return valid, set()
        room = lane.room()
        lane.submit(offloads[:room])
        for p in offloads[room:]:
            p.action = Action(Verdict.RECONSUME, "the offload lane is full (the offload endpoint is slow or down)",
                              delay_s=min(30.0, self.policy.max_delay_s), kind=Kind.TRANSIENT, counts=False)
        taken = {id(p) for p in offloads}
        return [(p, r) for p, r in valid if id(p) not in taken], {id(p) for p in offloads[:room]}

    def _settle_offloads(self) -> int:
        """Dispose of the offload requests the lane has decided (this thread owns every disposition)."""
        if self.offload_lane is None:
            return 0
        done = self.offload_lane.finished()
        if not done:
            return 0
        count = len(done)
        done = self._hold_if_down(done)  # the metadata store's outage, met while verifying offloads
        deferred = self._publish_copies(done)
        for p in done:
            if id(p) not in deferred:
                self._dispose(p)
        return count

    def _hold_if_down(self, pending: list[_Pending]) -> list[_Pending]:
        """Keep the requests a dependency outage failed in hand (see :mod:`.breaker`); the rest go on."""
        transient = [p for p in pending if p.action.transient]
        if not transient or not self.breakers.any_down():
            return pending
        self._on_hold.extend((p.message, p.consumer) for p in transient)
        self.metrics.on_hold.set(len(self._on_hold))
        return [p for p in pending if not p.action.transient]

    def _publish_copies(self, pending: list[_Pending]) -> set[int]:
        """The batch's RETRY and DLQ copies, pipelined (one round trip per window, not per message);
        returns the ids of the ``_Pending`` whose copy the broker refused (now deferred).

        Each receipted copy marks its message published, so ``_dispose`` only acks it; a copy
        that cannot even be built, or a batch the client fails outright, is left to ``_dispose``,
        which handles each message on its own as before."""
        copies: dict[Verdict, list[tuple[_Pending, Outgoing]]] = {v: [] for v in _COPIED}
        for p in pending:
            if p.published or p.action.verdict not in copies:
                continue
            try:
                copy = self._copy_of(p)
            except Exception:  # noqa: BLE001 - _dispose meets the same error and parks the message with it
                continue
            copies[p.action.verdict].append((p, copy))
        deferred: set[int] = set()
        for verdict, send in ((Verdict.RECONSUME, self.publisher.send_retries),
                              (Verdict.DLQ, self.publisher.send_dead_letters)):
            items = copies[verdict]
            if not items:
                continue
            try:
                receipts = send([copy for _, copy in items])
                if len(receipts) != len(items):
                    raise BrokerError(f"{len(receipts)} receipts for {len(items)} copies")
            except Exception:  # noqa: BLE001 - the one-by-one path below decides for each message
                _log.exception("publishing %d %s copies failed; publishing them one by one", len(items), verdict)
                continue
            refused = []
            for (p, _), receipt in zip(items, receipts, strict=True):
                if isinstance(receipt, BrokerError):
                    self._defer(p, str(receipt), quiet=True)
                    deferred.add(id(p))
                    refused.append(receipt)
                    continue
                self._published(p)
            if refused:  # one line for the batch: a refusing broker refuses every copy alike
                _log.warning("could not publish %d %s copies (%s): will retry", len(refused), verdict.value,
                             refused[0])
        return deferred

    @staticmethod
    def _copy_of(p: _Pending) -> Outgoing:
        """The RETRY or DLQ copy of a message to reconsume or dead-letter."""
        if p.action.verdict == Verdict.RECONSUME:
            return dispose.retry_copy(p.message, p.action.delay_s, counts=p.action.counts,
                                      grace_since_ms=p.action.grace_since_ms)
        return dispose.dead_letter_copy(p.message, p.action.kind.value or "failed", p.action.reason,
                                        undecodable=p.undecodable)

    def _published(self, p: _Pending) -> None:
        """Its copy is receipted: only the ack is left (a failed ack must not publish it twice)."""
        failpoint("retry.after-publish" if p.action.verdict == Verdict.RECONSUME else "dlq.after-publish")
        p.published = True
        if p.action.verdict == Verdict.DLQ and p.action.kind == Kind.MAX_RETRIES:
            self.metrics.max_retry_reached.inc()

    def _dispose(self, p: _Pending) -> None:
        if p.action.verdict == Verdict.DRY_RUN:
            _log.info("%s", p.action.reason if p.request is None else f"{p.request.describe()}: {p.action.reason}")
            return  # left unacked: the subscription redelivers it to a real run
        try:
            self._publish_and_ack(p)
        except BrokerError as e:
            self._defer(p, str(e))
            return
        except Exception as e:  # noqa: BLE001 - e.g. a delay the client cannot represent: park it, with why
            _log.exception("disposing of %s failed", p.message.message_id)
            if p.published or p.action.verdict == Verdict.DLQ:
                self._defer(p, f"{type(e).__name__}: {e}")
                return
            p.action = Action(Verdict.DLQ, f"could not reconsume ({type(e).__name__}: {e}); was: {p.action.reason}",
                              kind=Kind.INTERNAL_ERROR)
            self._dispose(p)
            return
        outcome = decision.outcome_of(p.action)
        self._settled.add(p.message)
        self.metrics.acked.labels(outcome=outcome.value).inc()
        if outcome == Outcome.DELETED and p.request is not None:
            self.metrics.send_to_delete.observe(max(0.0, self.clock() - p.request.marked_at / 1000))
        self._log_outcome(p, outcome)
        if self.on_settled is not None:
            self.on_settled(Settled(p.message, p.request, p.action, outcome))

    def _publish_and_ack(self, p: _Pending) -> None:
        if not p.published and p.action.verdict in _COPIED:
            copy = self._copy_of(p)
            if p.action.verdict == Verdict.RECONSUME:
                self.publisher.send_retry(copy.data, copy.properties, copy.deliver_after_s, copy.source_topic)
            else:
                self.publisher.send_dlq(copy.data, copy.properties, copy.source_topic)
            self._published(p)
        if self.record is not None and not p.recorded:
            self.record(Settled(p.message, p.request, p.action, decision.outcome_of(p.action)))
            p.recorded = True
        failpoint("delete.before-ack")
        p.consumer.ack(p.message)
        self.acked.record(p.message.topic)

    def _defer(self, p: _Pending, why: str, quiet: bool = False) -> None:
        now = time.monotonic()
        if p.failures == 0:
            p.first_failure = now
        p.failures += 1
        p.next_try = now + min(30.0, self.dispose_backoff_s * 2 ** min(p.failures - 1, 6))
        self.metrics.dispose_failures.inc()
        if not quiet:
            _log.warning("could not dispose of %s (%s): will retry", p.message.message_id, why)
        self._undisposed.append(p)
        self.metrics.undisposed.set(len(self._undisposed))

    def _retry_undisposed(self) -> None:
        now = time.monotonic()
        due = [p for p in self._undisposed if p.next_try <= now]
        if not due:
            return
        self._undisposed = [p for p in self._undisposed if p.next_try > now]
        for p in due:
            self._dispose(p)
        self.metrics.undisposed.set(len(self._undisposed))

    def _log_outcome(self, p: _Pending, outcome: Outcome) -> None:
        what = p.request.describe() if p.request else f"message {p.message.message_id}"
        level = logging.WARNING if outcome in (Outcome.METADATA_MISMATCH, Outcome.DLQ) else logging.INFO
        fields = {"outcome": outcome.value, "reason": p.action.reason, "messageId": p.message.message_id,
                  "attempts": dispose.attempts(p.message)}
        if p.request is not None:
            fields.update(ledger=p.request.ledger_id, ledgerType=p.request.ledger_type.value,
                          topic=p.request.topic_name)
        # "deleted (deleted)" said it twice: the reason only when it adds something
        detail = "" if p.action.reason in (outcome.value, "deleted", "absent") else f" ({p.action.reason})"
        _log.log(level, "%s: %s%s", what, outcome.value, detail, extra=fields)
