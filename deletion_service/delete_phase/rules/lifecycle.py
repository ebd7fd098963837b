"""The life of one received message in the delete phase, as a table.

The lifecycle rule (after h11's ``_state.py``): where a message stands and what may happen
to it next is this table and nothing else.  No I/O here: the worker
(``worker.py``) receives, publishes, records and acks, and after each of those
calls it tells the message's :class:`MessageInHand` what happened; an event the
table has no row for raises :class:`IllegalTransition` instead of quietly
publishing a second copy or acking a message whose record was never written.

The path every message takes::

    RECEIVED ──decide──▶ DECIDED ──publish copy──▶ COPY_PUBLISHED ──record──▶ RECORDED ──ack──▶ ACKED
        │                  │  └──────────────── record (no copy to publish) ──────▲
        │                  │     (either) ──refuse record──▶ RECORD_REFUSED ──record──┘
        │                  ├──pause──▶ PAUSED ──resume──▶ RECEIVED   (a dependency outage)
        │                  └──leave unacked──▶ LEFT_UNACKED          (dry run: a real run gets it)
        ├──hold until due──▶ NOT_YET_DUE ──fall due──▶ RECEIVED
        │                        └──hand back──▶ HANDED_BACK          (held set full: back to RETRY)
        ├──send to lane──▶ IN_LANE ──decide──▶ LANE_DECIDED ──take back──▶ DECIDED
        └──ack again──▶ ACKED / leave unacked──▶ LEFT_UNACKED         (settled here already)

A publish, record or ack the broker refuses is ``FAIL``: the message keeps its
stage (a published copy is never published again, a written record never
written twice) and waits for its next try with backoff.  A RETRY copy that
cannot even be built is ``REDECIDE``: the decision table turns it into a dead
letter (``decision.could_not_reconsume``).  The terminal stages are ACKED,
HANDED_BACK (acked once its copy is on RETRY) and LEFT_UNACKED (the
subscription redelivers it); a message the worker stops holding in any other
stage is simply not acked, and the broker redelivers it.

Two stages carry gates that would otherwise be flags beside the table:

* ``LANE_DECIDED``: a lane (the offload lane's threads, the delete process) decided the
  message, but it is still the lane's.  It has no publish, record or ack row, so the worker
  cannot dispose of it by mistake; only ``TAKE_BACK``, when the lane hands it over, makes
  it ``DECIDED`` again, on the worker's thread.
* ``RECORD_REFUSED``: the audit trail refused its record (a full disk, a read-only volume,
  the trail's lock held elsewhere).  While any message stands here the trail counts as
  refused: the worker takes no new batch and nothing more is deleted (:func:`gate`), so a
  deletion never goes unrecorded for longer than the batch in hand.

:func:`gate` is the table's batch-level row: whether the worker may take a new batch now.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import assert_never

from deletion_service.broker.interface import Consumer, Received
from deletion_service.delete_phase.rules.decision import Action, Verdict
from deletion_service.protocol.claimed_words import claimed_values, not_names, without_claimed_words
from deletion_service.protocol.request import PendingDeleteLedgerInfo

#: Backoff of a failed disposition: doubled per failure from the worker's base, up to this.
MAX_BACKOFF_S = 30.0


class Stage(StrEnum):
    RECEIVED = "received"  # taken from a consumer, nothing decided
    NOT_YET_DUE = "not-yet-due"  # a RETRY message held in memory until its delay has passed
    IN_LANE = "in-lane"  # being decided elsewhere: the offload lane's threads, or the delete process
    LANE_DECIDED = "lane-decided"  # decided by its lane, not yet handed back: still the lane's
    DECIDED = "decided"  # its action is known; nothing published, recorded or acked yet
    PAUSED = "paused"  # its verification met a dependency outage: kept in hand, unacked, until it ends
    COPY_PUBLISHED = "copy-published"  # its RETRY or DLQ copy is receipted
    RECORD_REFUSED = "record-refused"  # the audit trail refused its record: nothing more is deleted meanwhile
    RECORDED = "recorded"  # its audit record is written
    ACKED = "acked"
    HANDED_BACK = "handed-back"  # a not-yet-due message back on RETRY with the delay it has left, acked
    LEFT_UNACKED = "left-unacked"  # never acked on purpose: the subscription redelivers it


class Event(StrEnum):
    HOLD_UNTIL_DUE = "hold until due"
    FALL_DUE = "fall due"
    HAND_BACK = "hand back"
    ACK_AGAIN = "ack again"
    SEND_TO_LANE = "send to lane"
    DECIDE = "decide"
    TAKE_BACK = "take back"
    REDECIDE = "redecide"
    PAUSE = "pause"
    RESUME = "resume"
    PUBLISH_COPY = "publish copy"
    RECORD = "record"
    REFUSE_RECORD = "refuse record"
    ACK = "ack"
    FAIL = "fail"
    LEAVE_UNACKED = "leave unacked"


class Step(StrEnum):
    """What a decided message needs next (the worker does it, then reports the event)."""

    PUBLISH_RETRY_COPY = "publish retry copy"
    PUBLISH_DLQ_COPY = "publish dlq copy"
    RECORD = "record"
    ACK = "ack"
    LEAVE_UNACKED = "leave unacked"
    NOTHING = "nothing"  # not decided yet, or already done


class IllegalTransition(RuntimeError):
    """An event the table has no row for: a bug in the driver, never a message's doing."""


#: (stage, event) -> the next stage.  Every row is a sentence of the module's picture.
TRANSITIONS: dict[tuple[Stage, Event], Stage] = {
    (Stage.RECEIVED, Event.HOLD_UNTIL_DUE): Stage.NOT_YET_DUE,
    (Stage.RECEIVED, Event.ACK_AGAIN): Stage.ACKED,
    (Stage.RECEIVED, Event.LEAVE_UNACKED): Stage.LEFT_UNACKED,
    (Stage.RECEIVED, Event.SEND_TO_LANE): Stage.IN_LANE,
    (Stage.RECEIVED, Event.DECIDE): Stage.DECIDED,
    (Stage.NOT_YET_DUE, Event.FALL_DUE): Stage.RECEIVED,
    (Stage.NOT_YET_DUE, Event.HAND_BACK): Stage.HANDED_BACK,
    (Stage.IN_LANE, Event.DECIDE): Stage.LANE_DECIDED,
    (Stage.LANE_DECIDED, Event.TAKE_BACK): Stage.DECIDED,
    (Stage.DECIDED, Event.PAUSE): Stage.PAUSED,
    (Stage.DECIDED, Event.REDECIDE): Stage.DECIDED,
    (Stage.DECIDED, Event.PUBLISH_COPY): Stage.COPY_PUBLISHED,
    (Stage.DECIDED, Event.RECORD): Stage.RECORDED,
    (Stage.DECIDED, Event.REFUSE_RECORD): Stage.RECORD_REFUSED,
    (Stage.DECIDED, Event.LEAVE_UNACKED): Stage.LEFT_UNACKED,
    (Stage.DECIDED, Event.FAIL): Stage.DECIDED,
    (Stage.PAUSED, Event.RESUME): Stage.RECEIVED,
    (Stage.COPY_PUBLISHED, Event.RECORD): Stage.RECORDED,
    (Stage.COPY_PUBLISHED, Event.REFUSE_RECORD): Stage.RECORD_REFUSED,
    (Stage.RECORD_REFUSED, Event.RECORD): Stage.RECORDED,
    (Stage.RECORD_REFUSED, Event.FAIL): Stage.RECORD_REFUSED,
    (Stage.COPY_PUBLISHED, Event.FAIL): Stage.COPY_PUBLISHED,
    (Stage.RECORDED, Event.ACK): Stage.ACKED,
    (Stage.RECORDED, Event.FAIL): Stage.RECORDED,
}

#: The events that carry out a decided message's next step: legal only when it *is* the next step.
_STEP_EVENTS = {Step.PUBLISH_RETRY_COPY: Event.PUBLISH_COPY, Step.PUBLISH_DLQ_COPY: Event.PUBLISH_COPY,
                Step.RECORD: Event.RECORD, Step.ACK: Event.ACK, Step.LEAVE_UNACKED: Event.LEAVE_UNACKED}
TERMINAL = frozenset({Stage.ACKED, Stage.HANDED_BACK, Stage.LEFT_UNACKED})


def next_step(stage: Stage, verdict: Verdict | None) -> Step:
    """What a message at ``stage`` with ``verdict`` needs next: a copy first for a reconsume or a
    dead letter (published before the ack, so a crash duplicates, never loses), then the record
    (before the ack, so a crash repeats a record, never loses one), then the ack."""
    if verdict is None:
        return Step.NOTHING
    match stage:
        case Stage.DECIDED:
            return _first_step(verdict)
        case Stage.COPY_PUBLISHED | Stage.RECORD_REFUSED:
            return Step.RECORD
        case Stage.RECORDED:
            return Step.ACK
        case (Stage.RECEIVED | Stage.NOT_YET_DUE | Stage.IN_LANE | Stage.LANE_DECIDED | Stage.PAUSED | Stage.ACKED
              | Stage.HANDED_BACK | Stage.LEFT_UNACKED):
            return Step.NOTHING
        case _:
            assert_never(stage)


def _first_step(verdict: Verdict) -> Step:
    match verdict:
        case Verdict.RECONSUME:
            return Step.PUBLISH_RETRY_COPY
        case Verdict.DLQ:
            return Step.PUBLISH_DLQ_COPY
        case Verdict.DRY_RUN:
            return Step.LEAVE_UNACKED  # verified, nothing done: the subscription redelivers it to a real run
        case (Verdict.DELETE_BOOKKEEPER | Verdict.DELETE_OFFLOAD | Verdict.ACK_ABSENT | Verdict.ACK_IN_USE
              | Verdict.ACK_MISMATCH):
            return Step.RECORD
        case _:
            assert_never(verdict)


#: :func:`next_step` of every (stage, verdict), worked out once: a message asks for its next step
#: several times on its way out (``MessageInHand.next``), and the table is small and fixed.
_NEXT: dict[tuple[Stage, Verdict | None], Step] = {(stage, verdict): next_step(stage, verdict)
                                                   for stage in Stage for verdict in (*Verdict, None)}


@dataclass(eq=False)
class MessageInHand:
    """One received message on its way out of our hands (identity is the object: two redeliveries of
    one message are two disposals)."""

    message: Received
    consumer: Consumer
    stage: Stage = Stage.RECEIVED
    request: PendingDeleteLedgerInfo | None = None
    #: the payload could not be decoded (its DLQ copy carries the bytes for an operator)
    undecodable: bool = False
    action: Action | None = None
    #: a RETRY message's due time (ms), while it is not yet due
    due_ms: int = 0
    failures: int = 0  # failed dispositions so far
    next_try: float = 0.0  # monotonic: when a failed disposition is tried again
    first_failure: float = 0.0  # monotonic

    @property
    def decided(self) -> Action:
        """The action of a decided message (raises if nothing is decided: a driver bug)."""
        if self.action is None:
            raise IllegalTransition(f"{self.message.message_id} at {self.stage}: nothing decided yet")
        return self.action

    @property
    def admitted(self) -> PendingDeleteLedgerInfo:
        """The decoded request of an admitted message (raises if it was never decoded: a driver bug)."""
        if self.request is None:
            raise IllegalTransition(f"{self.message.message_id} at {self.stage}: not decoded")
        return self.request

    @property
    def next(self) -> Step:
        return _NEXT[(self.stage, self.action.verdict if self.action is not None else None)]

    @property
    def done(self) -> bool:
        return self.stage in TERMINAL

    def advance(self, event: Event) -> Stage:
        """Apply ``event``; an event with no row, or one that is not the message's next step, raises."""
        target = TRANSITIONS.get((self.stage, event))
        if target is None:
            raise IllegalTransition(f"{self.message.message_id}: no {event!s} from {self.stage}")
        if event == Event.REFUSE_RECORD and self.next != Step.RECORD:
            raise IllegalTransition(f"{self.message.message_id}: a record refused before its step ({self.next!s})")
        if self.stage == Stage.DECIDED and event in _STEP_EVENTS.values() and _STEP_EVENTS.get(self.next) != event:
            raise IllegalTransition(f"{self.message.message_id}: {event!s} is not the next step ({self.next!s}) "
                                    f"of a {self.decided.verdict} verdict")
        self.stage = target
        return target

    def decide(self, action: Action) -> None:
        self.advance(Event.DECIDE)
        self.action = self._in_our_words(action)

    def redecide(self, action: Action) -> None:
        """Only before any copy is out: what is published stays what was decided."""
        self.advance(Event.REDECIDE)
        self.action = self._in_our_words(action)

    def _in_our_words(self, action: Action) -> Action:
        """The action with no words of the request's in its reason (``protocol.claimed_words``): every
        copy, record and log line of this message quotes the reason from here."""
        values = not_names(self.request.strings()) if self.request is not None else claimed_values(self.message.data)
        reason = without_claimed_words(action.reason, values)
        return action if reason == action.reason else dataclasses.replace(action, reason=reason)

    def take_back(self) -> None:
        """Its lane handed it over: from now on the worker's thread disposes of it."""
        self.advance(Event.TAKE_BACK)

    def refuse_record(self) -> None:
        """The audit trail refused its record: it waits here, unacked, for the trail to take it."""
        self.advance(Event.REFUSE_RECORD)

    def pause(self) -> None:
        """Held through a dependency outage: decided again, from scratch, when it is over."""
        self.advance(Event.PAUSE)

    def resume(self) -> None:
        self.advance(Event.RESUME)
        self.action = None

    def fail(self, now: float, base_backoff_s: float) -> None:
        """A publish, record or ack failed: same stage, tried again after a growing backoff."""
        self.advance(Event.FAIL)
        if self.failures == 0:
            self.first_failure = now
        self.failures += 1
        self.next_try = now + min(MAX_BACKOFF_S, base_backoff_s * 2 ** min(self.failures - 1, 6))


class Gate(StrEnum):
    """Whether the worker may take a new batch now, and if not, why (the table's batch-level row)."""

    OPEN = "open"
    TRAIL_REFUSED = "trail refused"  # a record waits at RECORD_REFUSED: take nothing, delete nothing more
    DEPENDENCY_DOWN = "dependency down"  # a store is down: take nothing, spend no request's retries
    FULL = "full"  # every message taken may end up waiting for its next try: no room for one more


def gate(waiting: Iterable[MessageInHand], dependencies_ready: Callable[[], bool], room: int) -> Gate:
    """The worker's gate before it takes a batch, in this order: a refused record first (no new deletes
    may go unrecorded: a request the trail cannot name must not be followed by more), then an outage
    (a batch taken now would spend retries on it; ``dependencies_ready`` probes, so it is asked only
    when no record is refused), then room (a message taken may end up waiting)."""
    if trail_refused(waiting):
        return Gate.TRAIL_REFUSED
    if not dependencies_ready():
        return Gate.DEPENDENCY_DOWN
    if room <= 0:
        return Gate.FULL
    return Gate.OPEN


def trail_refused(waiting: Iterable[MessageInHand]) -> bool:
    """Whether a message waits for the audit trail to take its record: then nothing more is deleted,
    here or in the delete process, and the admin API's synchronous delete answers 503."""
    return any(d.stage == Stage.RECORD_REFUSED for d in waiting)


def pauses(action: Action, dependency_down: bool) -> bool:
    """A request a dependency outage failed is kept in hand, unacked, until the outage ends: an outage
    of our own metadata store must spend no request's retries (see ``delete_phase.storage.breaker``)."""
    return action.transient and dependency_down


def on_unexpected_error(d: MessageInHand) -> Event:
    """Disposing raised something other than the broker's refusal.  A RETRY copy not yet out (e.g. a
    delay the client cannot represent) would fail the same way forever: ``REDECIDE`` (a dead letter,
    ``decision.could_not_reconsume``).  Anything else keeps its stage and waits for its next try."""
    if d.stage == Stage.DECIDED and d.decided.verdict == Verdict.RECONSUME:
        return Event.REDECIDE
    return Event.FAIL

