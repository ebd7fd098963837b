"""The delete phase's message lifecycle (``delete_phase/rules/lifecycle.py``), row by row, without servers.

The table is pure, so it is tested the way h11 tests its state machine: every
legal event moves to the stage its row names, every other event raises, and
following the next step from any verdict reaches a terminal stage in order
(copy before record before ack)."""

from __future__ import annotations

import itertools

import pytest

from deletion_service.broker.interface import Received
from deletion_service.delete_phase.consumer.not_yet_due import NotYetDue
from deletion_service.delete_phase.rules import decision, lifecycle
from deletion_service.delete_phase.rules.decision import Action, Kind, Policy, Verdict
from deletion_service.delete_phase.rules.lifecycle import (
    TERMINAL,
    TRANSITIONS,
    Event,
    IllegalTransition,
    MessageInHand,
    Stage,
    Step,
)
from deletion_service.delete_phase.rules.outward import outward
from deletion_service.protocol.fate import Outcome, SyncOutcome

_ids = itertools.count()


def disposal(stage: Stage = Stage.RECEIVED, verdict: Verdict | None = None, kind: Kind = Kind.NONE) -> MessageInHand:
    msg = Received(b"{}", {}, "persistent://pulsar/system/ledger-deletion-partition-0", f"m{next(_ids)}", 0)
    d = MessageInHand(msg, consumer=None)  # type: ignore[arg-type]  # the table never touches the consumer
    d.stage = stage
    if verdict is not None:
        d.action = Action(verdict, "why", kind=kind)
    return d


def walk(d: MessageInHand) -> list[Step]:
    """Follow the next step until there is none, as the worker does when nothing fails."""
    steps = []
    while (step := d.next) != Step.NOTHING:
        steps.append(step)
        d.advance({Step.PUBLISH_RETRY_COPY: Event.PUBLISH_COPY, Step.PUBLISH_DLQ_COPY: Event.PUBLISH_COPY,
                   Step.RECORD: Event.RECORD, Step.ACK: Event.ACK, Step.LEAVE_UNACKED: Event.LEAVE_UNACKED}[step])
    return steps


@pytest.mark.parametrize("verdict,steps,end", [
    (Verdict.RECONSUME, [Step.PUBLISH_RETRY_COPY, Step.RECORD, Step.ACK], Stage.ACKED),
    (Verdict.DLQ, [Step.PUBLISH_DLQ_COPY, Step.RECORD, Step.ACK], Stage.ACKED),
    (Verdict.DELETE_BOOKKEEPER, [Step.RECORD, Step.ACK], Stage.ACKED),
    (Verdict.DELETE_OFFLOAD, [Step.RECORD, Step.ACK], Stage.ACKED),
    (Verdict.ACK_ABSENT, [Step.RECORD, Step.ACK], Stage.ACKED),
    (Verdict.ACK_IN_USE, [Step.RECORD, Step.ACK], Stage.ACKED),
    (Verdict.ACK_MISMATCH, [Step.RECORD, Step.ACK], Stage.ACKED),
    (Verdict.DRY_RUN, [Step.LEAVE_UNACKED], Stage.LEFT_UNACKED),
])
def test_every_verdict_reaches_a_terminal_stage_copy_before_record_before_ack(
        verdict: Verdict, steps: list[Step], end: Stage) -> None:
    d = disposal()
    d.decide(Action(verdict, "why"))
    assert walk(d) == steps
    assert d.stage == end and d.done


def test_every_verdict_has_a_first_step() -> None:
    for verdict in Verdict:
        assert lifecycle.next_step(Stage.DECIDED, verdict) != Step.NOTHING, verdict


@pytest.mark.parametrize("stage", list(Stage))
def test_an_event_without_a_row_raises(stage: Stage) -> None:
    for event in Event:
        d = disposal(stage, Verdict.DELETE_BOOKKEEPER)
        if (stage, event) in TRANSITIONS and not (stage == Stage.DECIDED and event in (
                Event.PUBLISH_COPY, Event.LEAVE_UNACKED)):
            assert d.advance(event) == TRANSITIONS[stage, event]
        else:
            with pytest.raises(IllegalTransition):
                d.advance(event)
            assert d.stage == stage, "a refused event changes nothing"


def test_terminal_stages_have_no_way_out() -> None:
    assert not [row for row in TRANSITIONS if row[0] in TERMINAL]


def test_only_the_next_step_may_happen() -> None:
    """A reconsume's record before its copy is out, or an ack before its record, is refused: a crash
    between them would lose the request (acked, no copy) or its record (acked, nothing written)."""
    d = disposal()
    d.decide(Action(Verdict.RECONSUME, "not yet", delay_s=5))
    for early in (Event.RECORD, Event.ACK, Event.LEAVE_UNACKED):
        with pytest.raises(IllegalTransition):
            d.advance(early)
    d.advance(Event.PUBLISH_COPY)
    with pytest.raises(IllegalTransition):
        d.advance(Event.PUBLISH_COPY)  # never a second copy
    with pytest.raises(IllegalTransition):
        d.advance(Event.ACK)
    d2 = disposal()
    d2.decide(Action(Verdict.ACK_IN_USE, "listed"))
    with pytest.raises(IllegalTransition):
        d2.advance(Event.PUBLISH_COPY)  # an in-use ack has no copy to publish


def test_a_failed_step_keeps_the_stage_and_backs_off() -> None:
    d = disposal()
    d.decide(Action(Verdict.DLQ, "bad", kind=Kind.INVALID_REQUEST))
    d.advance(Event.PUBLISH_COPY)
    d.fail(now=100.0, base_backoff_s=0.5)
    d.fail(now=101.0, base_backoff_s=0.5)
    assert d.stage == Stage.COPY_PUBLISHED and d.next == Step.RECORD, "a published copy is not published again"
    assert (d.failures, d.first_failure, d.next_try) == (2, 100.0, 102.0)
    for _ in range(20):
        d.fail(now=200.0, base_backoff_s=0.5)
    assert d.next_try == 200.0 + lifecycle.MAX_BACKOFF_S


def test_an_unexpected_error_redecides_only_a_reconsume_whose_copy_is_not_out() -> None:
    unsent = disposal()
    unsent.decide(Action(Verdict.RECONSUME, "not yet"))
    assert lifecycle.on_unexpected_error(unsent) == Event.REDECIDE
    unsent.redecide(decision.could_not_reconsume(unsent.decided, "OverflowError: delay"))
    assert unsent.decided.verdict == Verdict.DLQ and unsent.decided.kind == Kind.INTERNAL_ERROR
    assert lifecycle.on_unexpected_error(unsent) == Event.FAIL, "a dead letter is never redecided"
    sent = disposal()
    sent.decide(Action(Verdict.RECONSUME, "not yet"))
    sent.advance(Event.PUBLISH_COPY)
    assert lifecycle.on_unexpected_error(sent) == Event.FAIL
    with pytest.raises(IllegalTransition):
        sent.redecide(Action(Verdict.DLQ, "x"))  # what is published stays what was decided


def test_a_paused_request_is_decided_again_from_scratch() -> None:
    d = disposal()
    d.decide(Action(Verdict.RECONSUME, "zk down", kind=Kind.TRANSIENT))
    assert lifecycle.pauses(d.decided, dependency_down=True)
    d.pause()
    assert d.next == Step.NOTHING, "nothing is published or acked while paused"
    d.resume()
    assert (d.stage, d.action) == (Stage.RECEIVED, None)
    assert not lifecycle.pauses(Action(Verdict.RECONSUME, "zk down", kind=Kind.TRANSIENT), dependency_down=False)
    assert not lifecycle.pauses(Action(Verdict.RECONSUME, "young", kind=Kind.NOT_YET), dependency_down=True)
    max_retries_after_outage = Action(Verdict.DLQ, "max", kind=Kind.MAX_RETRIES, cause=Kind.TRANSIENT)
    assert lifecycle.pauses(max_retries_after_outage, dependency_down=True), "an outage never uses up the last try"


def test_nothing_decided_has_no_action_to_read() -> None:
    with pytest.raises(IllegalTransition):
        _ = disposal().decided
    with pytest.raises(IllegalTransition):
        _ = disposal().admitted  # never decoded: nothing to send to the pipeline or the lane


def test_the_not_yet_due_set_hands_out_due_messages_first_and_the_latest_to_evict() -> None:
    held = NotYetDue()
    added = []
    for due in (30, 10, 20, 30):
        d = disposal()
        d.due_ms = due
        held.add(d)
        added.append(d)
    assert held.until_ms() == 30
    assert held.latest() is added[3], "of two due last, the newest is handed back"
    assert held.pop_due(now_ms=20, limit=1) == [added[1]]
    assert held.pop_due(now_ms=20, limit=10) == [added[2]]
    held.remove(added[3])
    assert list(held) == [added[0]] and len(held) == 1


def test_decisions_met_outside_the_pipeline_come_from_the_decision_table() -> None:
    assert decision.cross_namespace("acme's topic names globex").kind == Kind.CROSS_NAMESPACE
    full = decision.offload_lane_full(Policy(reconsume_later_s=600))
    assert (full.verdict, full.kind, full.counts, full.delay_s) == (Verdict.RECONSUME, Kind.LANE_FULL, False, 30.0)
    assert decision.invalid("not json").verdict == Verdict.DLQ


@pytest.mark.parametrize("action,outcome,sync,reason", [
    (Action(Verdict.DELETE_BOOKKEEPER, "ok"), Outcome.DELETED, SyncOutcome.DELETED, None),
    (Action(Verdict.ACK_ABSENT, "gone"), Outcome.ABSENT, SyncOutcome.ABSENT, None),
    (Action(Verdict.ACK_IN_USE, "listed"), Outcome.STILL_IN_USE, SyncOutcome.STILL_IN_USE, None),
    (Action(Verdict.ACK_MISMATCH, "other"), Outcome.METADATA_MISMATCH, SyncOutcome.METADATA_MISMATCH, None),
    (Action(Verdict.RECONSUME, "zk", kind=Kind.TRANSIENT), Outcome.RECONSUMED, SyncOutcome.UNAVAILABLE, None),
    (Action(Verdict.RECONSUME, "bug", kind=Kind.INTERNAL_ERROR), Outcome.RECONSUMED, SyncOutcome.UNAVAILABLE, None),
    (Action(Verdict.RECONSUME, "young", kind=Kind.NOT_YET), Outcome.RECONSUMED, SyncOutcome.NOT_YET, None),
    (Action(Verdict.DLQ, "x", kind=Kind.CROSS_NAMESPACE), Outcome.DLQ, SyncOutcome.FAILED, "cross-namespace"),
    (Action(Verdict.DLQ, "x"), Outcome.DLQ, SyncOutcome.FAILED, "failed"),
    (Action(Verdict.DRY_RUN, "would"), Outcome.WOULD_DELETE, SyncOutcome.WOULD_DELETE, None),
])
def test_one_row_gives_every_outward_form(action: Action, outcome: Outcome, sync: SyncOutcome,
                                          reason: str | None) -> None:
    out = outward(action)
    assert (out.outcome, out.sync, out.dlq_reason) == (outcome, sync, reason)


def test_a_lane_decided_message_stays_the_lanes_until_taken_back() -> None:
    """A message its lane decided has no publish, record or ack row: the worker cannot dispose of it
    until the lane hands it back, so a stage read on the worker's thread can never settle it twice."""
    d = disposal()
    d.advance(Event.SEND_TO_LANE)
    d.decide(Action(Verdict.DELETE_BOOKKEEPER, "deleted"))
    assert d.stage == Stage.LANE_DECIDED and d.next == Step.NOTHING
    for event in (Event.RECORD, Event.ACK, Event.PUBLISH_COPY, Event.REFUSE_RECORD):
        with pytest.raises(IllegalTransition):
            d.advance(event)
    d.take_back()
    assert d.stage == Stage.DECIDED and walk(d) == [Step.RECORD, Step.ACK]


@pytest.mark.parametrize("verdict", [Verdict.DELETE_BOOKKEEPER, Verdict.RECONSUME])
def test_a_refused_record_waits_at_its_own_stage_and_is_recorded_before_its_ack(verdict: Verdict) -> None:
    d = disposal(Stage.DECIDED, verdict)
    if verdict == Verdict.RECONSUME:
        with pytest.raises(IllegalTransition):  # its copy comes first: a refused record cannot skip it
            d.refuse_record()
        d.advance(Event.PUBLISH_COPY)
    d.refuse_record()
    assert d.stage == Stage.RECORD_REFUSED and d.next == Step.RECORD
    d.fail(now=0.0, base_backoff_s=1.0)  # refused again: same stage
    with pytest.raises(IllegalTransition):
        d.advance(Event.ACK)  # never acked unrecorded
    assert walk(d) == [Step.RECORD, Step.ACK] and d.stage == Stage.ACKED


def test_the_gate_closes_on_a_refused_record_first_then_an_outage_then_no_room() -> None:
    refused = disposal(Stage.RECORD_REFUSED, Verdict.DELETE_BOOKKEEPER)
    waiting = disposal(Stage.DECIDED, Verdict.DELETE_BOOKKEEPER)
    asked: list[bool] = []

    def ready(answer: bool):  # records whether the outage probe ran
        def probe() -> bool:
            asked.append(answer)
            return answer
        return probe

    assert lifecycle.gate([waiting, refused], ready(False), 0) == lifecycle.Gate.TRAIL_REFUSED
    assert asked == [], "no outage probe while a record is refused"
    assert lifecycle.gate([waiting], ready(False), 5) == lifecycle.Gate.DEPENDENCY_DOWN
    assert lifecycle.gate([waiting], ready(True), 0) == lifecycle.Gate.FULL
    assert lifecycle.gate([], ready(True), 5) == lifecycle.Gate.OPEN
    assert lifecycle.trail_refused([refused]) and not lifecycle.trail_refused([waiting])
