"""The delete-phase consumer: receive a batch, gather facts, decide, delete, dispose.

Two consumers on the ``ledger-deletion`` subscription — the request
partitions and RETRY — so RETRY messages that are not yet due can be held
(the embedded broker ignores delayed delivery) without starving new requests.
Held messages are bounded; unacked ones return to the subscription when the
worker stops, so stopping at any point loses nothing.

Every received message ends in exactly one of: ack (deleted, absent, still in
use, mismatch), reconsume (RETRY, then ack), or DLQ (then ack).  If the broker
refuses the ack or the publish, the message stays in ``_undisposed`` and is
retried — it is never silently dropped.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from deletion_service.broker.interface import BrokerError, Consumer, Received
from deletion_service.delete_phase import decision, dispose
from deletion_service.delete_phase.decision import Action, Outcome, Policy, Verdict
from deletion_service.delete_phase.execute import Executor
from deletion_service.delete_phase.gather import FactGatherer
from deletion_service.metrics import DeletionMetrics
from deletion_service.model import InvalidRequest, PendingDeleteLedgerInfo, decode
from deletion_service.publisher import RequestPublisher

_log = logging.getLogger(__name__)


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


class DeletePhaseWorker:
    def __init__(
        self,
        requests: Consumer,
        retries: Consumer,
        publisher: RequestPublisher,
        gatherer: FactGatherer,
        executor: Executor,
        policy: Policy,
        metrics: DeletionMetrics,
        batch_size: int = 100,
        max_held: int = 10_000,
        clock: Callable[[], float] = time.time,
        on_settled: Callable[[Settled], None] | None = None,
    ) -> None:
        self.requests, self.retries = requests, retries
        self.publisher, self.gatherer, self.executor = publisher, gatherer, executor
        self.policy, self.metrics = policy, metrics
        self.batch_size, self.max_held = batch_size, max_held
        self.clock = clock
        self.on_settled = on_settled
        self._held: list[tuple[int, int, Received]] = []  # (due ms, seq, message) from RETRY
        self._seq = itertools.count()
        self._undisposed: list[_Pending] = []
        self.last_message_at = 0.0
        self.busy = False
        self._lock = threading.Lock()

    # ---- state the daemon reads for --exit-when-idle

    @property
    def held(self) -> int:
        return len(self._held)

    @property
    def idle(self) -> bool:
        return not self.busy and not self._held and not self._undisposed

    # ---- the loop

    def run(self, stop: threading.Event, poll_s: float = 0.2) -> None:
        while not stop.is_set():
            self.run_once(poll_s)

    def run_once(self, wait_s: float = 0.2) -> int:
        """Receive and process one batch; returns how many messages were settled."""
        with self._lock:
            self._retry_undisposed()
            batch = self._collect(wait_s)
            if not batch:
                return 0
            self.busy = True
            try:
                return self._process(batch)
            finally:
                self.busy = False

    def _collect(self, wait_s: float) -> list[tuple[Received, Consumer]]:
        """Due held messages first, then whatever both consumers have ready (1 ms polls, so a
        full batch costs no waiting); only an empty round waits, and only up to ``wait_s``."""
        batch: list[tuple[Received, Consumer]] = []
        now_ms = int(self.clock() * 1000)
        while self._held and self._held[0][0] <= now_ms and len(batch) < self.batch_size:
            batch.append((heapq.heappop(self._held)[2], self.retries))
        deadline = time.monotonic() + wait_s
        while len(batch) < self.batch_size:
            got = False
            for consumer in (self.requests, self.retries):
                if consumer is self.retries and len(self._held) >= self.max_held:
                    continue  # bounded: take no more RETRY messages until held ones are due
                while len(batch) < self.batch_size and (msg := self._receive(consumer, 0.001)) is not None:
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
        return batch

    def _take(self, msg: Received, consumer: Consumer, batch: list[tuple[Received, Consumer]]) -> None:
        self.last_message_at = time.monotonic()
        self.metrics.received.inc()
        due = dispose.due_at_ms(msg) if consumer is self.retries else 0
        if due > int(self.clock() * 1000):
            heapq.heappush(self._held, (due, next(self._seq), msg))
        else:
            batch.append((msg, consumer))

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
            p = _Pending(msg, consumer, Action(Verdict.RECONSUME, "undecided"), request)
            pending.append(p)
            valid.append((p, request))
        if valid:
            try:
                self._decide_and_delete(valid)
            except Exception as e:  # noqa: BLE001 - a bug must not lose or block requests
                _log.exception("unexpected error while processing a batch; reconsuming it")
                for p, _ in valid:
                    p.action = decision.retry_later(f"internal error: {type(e).__name__}: {e}",
                                                    dispose.attempts(p.message), self.policy)
        for p in pending:
            self._dispose(p)
        return len(pending)

    def _decide_and_delete(self, valid: list[tuple[_Pending, PendingDeleteLedgerInfo]]) -> None:
        requests = [r for _, r in valid]
        tries = [dispose.attempts(p.message) for p, _ in valid]
        facts = self.gatherer.gather(requests, tries)
        actions = [decision.decide(r, f, self.policy) for r, f in zip(requests, facts, strict=True)]
        results = self.executor.run(actions, facts)
        for (p, request), action, result, attempt in zip(valid, actions, results, tries, strict=True):
            if result == "dry-run":
                p.action = Action(Verdict.RECONSUME, "dry-run: would delete", kind="dry-run")
                continue
            if result is not None:
                self.metrics.count_delete(request.ledger_type.value, result)
                action = decision.settle_delete(action, result, attempt, self.policy)
            p.action = action

    def _dispose(self, p: _Pending) -> None:
        action = p.action
        if action.kind == "dry-run":
            _log.info("dry-run: would delete %s", p.request.describe() if p.request else "?")
            return  # left unacked: the subscription redelivers it to a real run
        try:
            if not p.published and action.verdict == Verdict.RECONSUME:
                dispose.publish_retry(self.publisher, p.message, action.delay_s)
                p.published = True
            elif not p.published and action.verdict == Verdict.DLQ:
                dispose.publish_dead_letter(self.publisher, p.message, action.kind or "failed", action.reason,
                                            undecodable=p.undecodable)
                p.published = True
                if action.kind == "max-retries-reached":
                    self.metrics.max_retry_reached.inc()
            p.consumer.ack(p.message)
        except BrokerError as e:
            _log.warning("could not dispose of %s (%s): will retry", p.message.message_id, e)
            self._undisposed.append(p)
            return
        outcome = decision.outcome_of(action)
        self.metrics.acked.labels(outcome=outcome.value).inc()
        self._log_outcome(p, outcome)
        if self.on_settled is not None:
            self.on_settled(Settled(p.message, p.request, action, outcome))

    def _retry_undisposed(self) -> None:
        waiting, self._undisposed = self._undisposed, []
        for p in waiting:
            self._dispose(p)

    def _log_outcome(self, p: _Pending, outcome: Outcome) -> None:
        what = p.request.describe() if p.request else f"message {p.message.message_id}"
        level = logging.WARNING if outcome in (Outcome.METADATA_MISMATCH, Outcome.DLQ) else logging.INFO
        _log.log(level, "%s: %s (%s)", what, outcome.value, p.action.reason)

