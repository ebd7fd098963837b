"""Taking messages in: both consumers, RETRY messages not yet due, and redeliveries of settled ones.

Two consumers on the ``ledger-deletion`` subscription — the request
partitions and RETRY — so RETRY messages that are not yet due can be held
(the embedded broker ignores delayed delivery) without starving new requests.
Held messages are bounded (``Limits.max_not_yet_due``; the one due last is
handed back to RETRY with the delay it has left) and so are their delays (a
message's ``DELAY_TIME`` is honoured, capped by config's longest delay).  A
message settled here whose ack the broker lost comes back and is only
acknowledged again (:mod:`.settled_recently`), never settled twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from deletion_service.broker.interface import BrokerError, Consumer, Received
from deletion_service.broker.publisher import CopyPublisher
from deletion_service.delete_phase.consumer import copies as dispose
from deletion_service.delete_phase.consumer.ack_tally import AckTally
from deletion_service.delete_phase.consumer.not_yet_due import NotYetDue
from deletion_service.delete_phase.consumer.settled_recently import SettledRecently
from deletion_service.delete_phase.rules.decision import Policy
from deletion_service.delete_phase.rules.hold_reason import HoldSeal
from deletion_service.delete_phase.rules.lifecycle import Event, MessageInHand
from deletion_service.metrics import DeletionMetrics

_log = logging.getLogger(__name__)

#: With ``until`` (a batch with the delete process): how long an idle wait lasts before it is asked again.
UNTIL_POLL_S = 0.005


@dataclass
class Limits:
    """How much the worker keeps in hand, and how it paces failed dispositions (one object, shared
    by the worker's parts: a change shows in all of them)."""

    batch_size: int = 100
    max_not_yet_due: int = 10_000  # RETRY messages held in memory until due
    max_awaiting_next_try: int = 1_000  # dispositions the broker refused, waiting for their next try
    dispose_backoff_s: float = 0.5  # doubled per failure, up to lifecycle.MAX_BACKOFF_S


class Intake:
    """Collects batches of :class:`~.lifecycle.MessageInHand` from the request and RETRY consumers."""

    def __init__(self, requests: Consumer, retries: Consumer, publisher: CopyPublisher, policy: Policy,
                 metrics: DeletionMetrics, limits: Limits, settled: SettledRecently, acked: AckTally,
                 clock: Callable[[], float] = time.time, seal: HoldSeal | None = None) -> None:
        self.requests, self.retries, self.publisher = requests, retries, publisher
        self.policy, self.metrics, self.limits, self.clock = policy, metrics, limits, clock
        self.settled_recently = settled  # shared with the disposer, which adds what it settles
        self.ack_tally = acked
        self.not_yet_due = NotYetDue(seal)
        # the held{reason} and held_overdue gauges read them when scraped
        metrics.held.watch(self.not_yet_due.by_reason, lambda: self.not_yet_due.overdue(self._now_ms() - 60_000))
        self.last_message_at = 0.0
        self._retry_paused_until = 0.0  # the RETRY consumer is not read until then (see collect)
        self._handed_back_in_pass = 0
        self._reacked_in_pass = 0

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def collect(self, wait_s: float, limit: int, until: Callable[[], bool] | None = None) -> list[MessageInHand]:
        """Due held messages first, then whatever both consumers have ready (1 ms polls, so a
        full batch costs no waiting); only an empty round waits, and only up to ``wait_s``.
        ``until``: return what is in hand as soon as it says so (the delete process has a batch
        decided, whose acks must not wait for this one to fill); asked every :data:`UNTIL_POLL_S`."""
        batch = self.not_yet_due.pop_due(self._now_ms(), limit)
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
                    self._take(MessageInHand(msg, consumer), batch)
            if until is not None and until():
                break
            if got:
                continue
            remaining = deadline - time.monotonic()
            if batch or remaining <= 0:
                break
            # idle: wait a little, not spin; a little less while the delete process decides a batch
            msg = self._receive(self.requests, min(0.05 if until is None else UNTIL_POLL_S, remaining))
            if msg is not None:
                self._take(MessageInHand(msg, self.requests), batch)
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

    def _take(self, d: MessageInHand, batch: list[MessageInHand]) -> None:
        self.last_message_at = time.monotonic()
        self.metrics.received.inc()
        if d.message in self.settled_recently:
            self._ack_again(d)
            return
        if self.not_yet_due.holds(d.message):  # redelivered (a broker restart): the held one acks it when due
            d.advance(Event.LEAVE_UNACKED)
            return
        now_ms = self._now_ms()
        if d.consumer is self.retries:
            d.due_ms = dispose.due_at_ms(d.message, self.policy.max_delay_s, now_ms)
        if d.due_ms <= now_ms:
            batch.append(d)
            return
        d.advance(Event.HOLD_UNTIL_DUE)
        self.not_yet_due.add(d)
        if len(self.not_yet_due) > self.limits.max_not_yet_due:
            self._hand_back_latest(now_ms, d)

    def _ack_again(self, d: MessageInHand) -> None:
        """A message settled here came back: its ack was lost.  Only the ack is owed (if this one is
        lost too, the broker redelivers it once more)."""
        try:
            d.consumer.ack(d.message)
        except BrokerError as e:
            _log.debug("re-acking %s failed (%s): it comes back", d.message.message_id, e)
            d.advance(Event.LEAVE_UNACKED)
            return
        d.advance(Event.ACK_AGAIN)
        self.ack_tally.record(d.message.topic)
        self.metrics.ack_lost.inc()
        self._reacked_in_pass += 1

    def _hand_back_latest(self, now_ms: int, newest: MessageInHand) -> None:
        """The not-yet-due set is full: the message due last goes back to RETRY with the delay it has left."""
        d = self.not_yet_due.latest()
        try:
            dispose.hand_back_to_retry(self.publisher, d.message, (d.due_ms - now_ms) / 1000)
            self.retries.ack(d.message)
        except BrokerError as e:
            _log.warning("not-yet-due set full and RETRY refused a message handed back (%s); holding it", e)
            return
        d.advance(Event.HAND_BACK)
        self.ack_tally.record(d.message.topic)
        self.settled_recently.add(d.message)  # its ack lost, its redelivery is only acked: one RETRY copy is enough
        self.not_yet_due.remove(d)
        if d is newest:
            self._handed_back_in_pass += 1

    def _receive(self, consumer: Consumer, timeout_s: float) -> Received | None:
        try:
            return consumer.receive(timeout_s)
        except BrokerError as e:
            _log.warning("receive failed: %s", e)
            time.sleep(min(1.0, timeout_s))
            return None
