"""Taking messages in: both consumers, RETRY messages not yet due, and redeliveries of settled ones.

Two consumers on the ``ledger-deletion`` subscription — the request
partitions and RETRY — so RETRY messages that are not yet due can be held
(the embedded broker ignores delayed delivery) without starving new requests.
Held messages are bounded in memory (``Limits.max_not_yet_due``) and so are
their delays (a message's ``DELAY_TIME`` is honoured, capped by config's
longest delay).  When memory is full, the message due last is **set aside**:
left unacked with the broker, only its due time kept here
(:mod:`.not_yet_due`), and asked for again (``Consumer.redeliver_unacked``)
once half the room is free or the first set aside falls due, at most every
:data:`ASK_BACK_EVERY_S`.  It is not republished: a broker that ignores delivery
delays would hand a republished copy straight back, and a flood of
far-future requests would then circle RETRY, costing a store write and a
receive per turn and keeping every other tenant's RETRY messages waiting
behind it.  Only beyond ``Limits.max_set_aside_per_topic`` on one RETRY topic
(the broker would stop dispatching that topic to us) is the message due last
handed back to RETRY with the delay it has left, as a consumer that cannot ask
for redelivery does.  A message settled here whose ack the broker lost comes
back and is only acknowledged again (:mod:`.settled_recently`), never settled
twice; a copy of one still in hand is left to the one in hand.
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
from deletion_service.delete_phase.rules import lifecycle
from deletion_service.delete_phase.rules.decision import Policy
from deletion_service.delete_phase.rules.hold_reason import HoldSeal
from deletion_service.delete_phase.rules.lifecycle import Event, MessageInHand
from deletion_service.delete_phase.rules.seal import Seal
from deletion_service.metrics import DeletionMetrics

_log = logging.getLogger(__name__)

#: With ``until`` (a batch with the delete process): how long an idle wait lasts before it is asked again.
UNTIL_POLL_S = 0.005
#: Messages set aside are asked for again at most this often: each time, every unacked RETRY message of
#: this consumer comes back once (those in hand are recognised and dropped).
ASK_BACK_EVERY_S = 5.0


@dataclass
class Limits:
    """How much the worker keeps in hand, and how it paces failed dispositions (one object, shared
    by the worker's parts: a change shows in all of them)."""

    batch_size: int = 100
    max_not_yet_due: int = 10_000  # RETRY messages held in memory until due
    #: not-yet-due messages left unacked with the broker, per RETRY topic (what this process keeps of each is
    #: small, but not nothing).  With the memory's default, a topic's unacked messages reach the 50,000 that
    #: Pulsar and pulsar-lite dispatch to one consumer by default first: the broker then stops dispatching
    #: that topic (its later messages wait there) and none is handed back
    max_set_aside_per_topic: int = 40_000
    max_awaiting_next_try: int = 1_000  # dispositions the broker refused, waiting for their next try
    dispose_backoff_s: float = 0.5  # doubled per failure, up to lifecycle.MAX_BACKOFF_S


class Intake:
    """Collects batches of :class:`~.lifecycle.MessageInHand` from the request and RETRY consumers."""

    def __init__(self, requests: Consumer, retries: Consumer, publisher: CopyPublisher, policy: Policy,
                 metrics: DeletionMetrics, limits: Limits, settled: SettledRecently, acked: AckTally,
                 clock: Callable[[], float] = time.time, seal: Seal | None = None) -> None:
        self.requests, self.retries, self.publisher = requests, retries, publisher
        self.policy, self.metrics, self.limits, self.clock = policy, metrics, limits, clock
        self.settled_recently = settled  # shared with the disposer, which adds what it settles
        self.ack_tally = acked
        self.seal = seal  # the key copies are sealed with: a count is believed only under it
        self.not_yet_due = NotYetDue(HoldSeal.sharing(seal))
        # the held{reason} and held_overdue gauges read them when scraped
        metrics.held.watch(self.not_yet_due.by_reason, lambda: self.not_yet_due.overdue(self._now_ms() - 60_000))
        self.last_message_at = 0.0
        self._retry_paused_until = 0.0  # the RETRY consumer is not read until then (see collect)
        self._handed_back_in_pass = 0
        self._reacked_in_pass = 0
        self._next_ask_back = 0.0  # monotonic: set-aside messages are not asked for again before then
        #: RETRY messages taken out to be decided, by key, until they leave our hands: asking for the
        #: set-aside ones again redelivers these too, and a copy of one still in hand must not be decided twice
        self._out: dict[tuple[str, str], MessageInHand] = {}

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def collect(self, wait_s: float, limit: int, until: Callable[[], bool] | None = None) -> list[MessageInHand]:
        """Due held messages first, then whatever both consumers have ready (1 ms polls, so a
        full batch costs no waiting); only an empty round waits, and only up to ``wait_s``.
        ``until``: return what is in hand as soon as it says so (the delete process has a batch
        decided, whose acks must not wait for this one to fill); asked every :data:`UNTIL_POLL_S`."""
        self._forget_settled()
        self._ask_back_set_aside()
        batch = self.not_yet_due.pop_due(self._now_ms(), limit)
        for d in batch:
            d.advance(Event.FALL_DUE)
            self._out[_key(d.message)] = d
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
            if batch or remaining <= 0 or retry_budget <= 0:
                break  # (RETRY has more: the next pass reads on at once, the request topics polled first)
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
        from_retry = d.consumer is self.retries
        if from_retry:
            if self.not_yet_due.holds(d.message) or self._in_hand(d.message):
                # redelivered (asked back, or a broker restart): the one in hand acks it when it is done
                d.advance(Event.LEAVE_UNACKED)
                return
            self.not_yet_due.aside.returned(_key(d.message))
        now_ms = self._now_ms()
        if from_retry:
            d.due_ms = dispose.due_at_ms(d.message, self.policy.max_delay_s, now_ms)
        if d.due_ms <= now_ms:
            if from_retry:
                self._out[_key(d.message)] = d
            batch.append(d)
            return
        d.advance(Event.HOLD_UNTIL_DUE)
        held = self.not_yet_due
        aside_from = held.aside.soonest_ms()
        if aside_from is not None and d.due_ms > aside_from and self._may_set_aside(d):
            held.set_aside(d)  # due later than one set aside already: memory keeps the soonest
            return
        held.add(d)
        if len(held) > self.limits.max_not_yet_due:
            latest = held.latest()
            if self._may_set_aside(latest):
                held.set_aside(latest)  # unacked, not in memory: no copy to circle RETRY
            else:
                self._hand_back_latest(now_ms, latest, d)

    def _may_set_aside(self, d: MessageInHand) -> bool:
        return (self.retries.redelivers_on_request
                and self.not_yet_due.aside.count(d.message.topic) < self.limits.max_set_aside_per_topic)

    def _in_hand(self, message: Received) -> bool:
        """Whether a copy of this RETRY message was taken out to be decided and has not left our hands."""
        d = self._out.get((message.topic, message.message_id))
        return d is not None and d.stage not in lifecycle.TERMINAL

    def _forget_settled(self) -> None:
        """Drop what left our hands from :attr:`_out` (a copy of it redelivered is ``settled_recently``'s)."""
        if self._out:
            self._out = {k: d for k, d in self._out.items() if d.stage not in lifecycle.TERMINAL}

    def _ask_back_set_aside(self) -> None:
        """Ask the broker for the set-aside messages again once half the memory is free (they fill it,
        soonest due first) or the first of them falls due, at most every :data:`ASK_BACK_EVERY_S`.
        Not before: until then the broker keeps them unacked and delivers nothing of them, so a flood
        held this way costs neither a receive nor a store write."""
        held = self.not_yet_due
        first = held.aside.soonest_ms()
        if first is None or time.monotonic() < self._next_ask_back:
            return
        if first > self._now_ms() and len(held) > self.limits.max_not_yet_due // 2:
            return
        self._next_ask_back = time.monotonic() + ASK_BACK_EVERY_S
        try:
            self.retries.redeliver_unacked()
        except BrokerError as e:
            _log.warning("could not ask for %d not-yet-due RETRY message(s) again (%s): trying again in %.0f s",
                         len(held.aside), e, ASK_BACK_EVERY_S)
            return
        self.metrics.asked_back.inc(len(held.aside))
        held.aside.clear()

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

    def _hand_back_latest(self, now_ms: int, d: MessageInHand, newest: MessageInHand) -> None:
        """The not-yet-due set is full and ``d`` (due last) cannot be set aside: it goes back to RETRY with
        the delay it has left."""
        try:
            dispose.hand_back_to_retry(self.publisher, d.message, (d.due_ms - now_ms) / 1000)
            self.retries.ack(d.message)
        except BrokerError as e:
            _log.warning("not-yet-due set full and RETRY refused a message handed back (%s); holding it", e)
            return
        d.advance(Event.HAND_BACK)
        self.metrics.handed_back.inc()
        self.ack_tally.record(d.message.topic)
        self.settled_recently.add(d.message)  # its ack lost, its redelivery is only acked: one RETRY copy is enough
        self.not_yet_due.remove(d)
        if d is newest:
            self._handed_back_in_pass += 1

    def _receive(self, consumer: Consumer, timeout_s: float) -> Received | None:
        """The next message, its retry count kept only when this tool sealed it (``copies.with_proven_count``)."""
        try:
            message = consumer.receive(timeout_s)
            return dispose.with_proven_count(message, self.seal) if message is not None else None
        except BrokerError as e:
            _log.warning("receive failed: %s", e)
            time.sleep(min(1.0, timeout_s))
            return None


def _key(message: Received) -> tuple[str, str]:
    return message.topic, message.message_id
