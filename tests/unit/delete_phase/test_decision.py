"""The delete-phase table, row by row, without servers (it is a pure function)."""

from __future__ import annotations

import itertools
from dataclasses import fields, replace

import pytest

from deletion_service.delete_phase.rules import decision
from deletion_service.delete_phase.rules.decision import Action, Kind, Policy, Verdict
from deletion_service.delete_phase.rules.facts import BookKeeperFact, DeleteResult, Evidence, Facts, OffloadFact
from deletion_service.delete_phase.rules.outward import outcome_of
from deletion_service.protocol.fate import DeleteStatus, Outcome
from deletion_service.protocol.request import InvalidRequest, PendingDeleteLedgerInfo, decode
from metastore.formats import (
    LedgerMetadata,
)

NOW = 1_800_000_000_000
DAY_MS = 86_400_000
POLICY = Policy(reconsume_later_s=600, max_retries=3, min_ledger_age_s=86_400)
TOPIC = "persistent://t/ns/orders"
ML = {"application": "pulsar", "component": "managed-ledger", "pulsar/managed-ledger": "t/ns/persistent/orders"}


def req(**kw: object) -> PendingDeleteLedgerInfo:
    base = {"topicName": TOPIC, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER", "ledgerId": 7,
            "markedAt": NOW, "reason": "trim"}
    return PendingDeleteLedgerInfo.model_validate({**base, **kw})


def bk(custom: dict[str, str] | None = None, state: str = "CLOSED", ctime: int | None = NOW - 2 * DAY_MS,
       path: str = "/ledgers/00/0000/L0007") -> BookKeeperFact:
    meta = LedgerMetadata(quorum_size=2, ensemble_size=3, ack_quorum_size=2, state=state, ctime=ctime,
                          custom_metadata={k: v.encode() for k, v in (ML if custom is None else custom).items()})
    return BookKeeperFact(path, meta, version=4, znode_ctime_ms=NOW - 3 * DAY_MS)


def test_invalid_payload_goes_to_dlq() -> None:
    with pytest.raises(InvalidRequest) as e:
        decode(b"{not json")
    action = decision.invalid(str(e.value))
    assert action.verdict == Verdict.DLQ and action.kind == "invalid-request"


@pytest.mark.parametrize("payload,fragment", [
    (b"\xff\xfe", "not UTF-8"),
    (b"[1,2]", "JSON object"),
    (b'{"topicName":"persistent://t/ns/x","ledgerComponent":"MANAGED_LEDGER","ledgerType":"LEDGER",'
     b'"ledgerId":-1,"markedAt":1,"reason":"trim"}', "ledgerId"),
    (b'{"topicName":"non-persistent://t/ns/x","ledgerComponent":"MANAGED_LEDGER","ledgerType":"LEDGER",'
     b'"ledgerId":1,"markedAt":1,"reason":"trim"}', "topicName"),
    (b'{"topicName":"persistent://t/ns/x","ledgerComponent":"MANAGED_CURSOR","ledgerType":"LEDGER",'
     b'"ledgerId":1,"markedAt":1,"reason":"trim"}', "cursorName is required"),
    (b'{"topicName":"persistent://t/ns/x","ledgerComponent":"MANAGED_LEDGER","ledgerType":"OFFLOAD_LEDGER",'
     b'"ledgerId":1,"markedAt":1,"reason":"trim"}', "offloadContext is required"),
    (b'{"topicName":"persistent://t/ns/x","ledgerComponent":"MANAGED_LEDGER","ledgerType":"LEDGER",'
     b'"ledgerId":"12","markedAt":1,"reason":"trim"}', "ledgerId"),
    (b'{"topicName":"persistent://t/ns/x","ledgerComponent":"BOGUS","ledgerType":"LEDGER",'
     b'"ledgerId":1,"markedAt":1,"reason":"trim"}', "ledgerComponent"),
])
def test_invalid_requests_are_named(payload: bytes, fragment: str) -> None:
    with pytest.raises(InvalidRequest, match=fragment):
        decode(payload)


def test_integral_floats_are_integers_but_fractions_and_strings_are_not() -> None:
    body = b'{"topicName":"persistent://t/ns/x","ledgerComponent":"MANAGED_LEDGER","ledgerType":"LEDGER",' \
        b'"ledgerId":%s,"markedAt":1.0,"reason":"trim"}'
    assert decode(body % b"5.0").ledger_id == 5
    for bad in (b"5.5", b'"5"', b"1e300"):
        with pytest.raises(InvalidRequest, match="ledgerId"):
            decode(body % bad)


def test_unknown_fields_are_ignored_and_json_is_stable() -> None:
    r = decode(b'{"topicName":"persistent://t/ns/x","ledgerComponent":"MANAGED_LEDGER","ledgerType":"LEDGER",'
               b'"ledgerId":9223372036854775807,"markedAt":1,"reason":"orphan","futureField":{"a":1}}')
    assert r.ledger_id == 2**63 - 1
    assert decode(r.to_json()) == r
    assert r.to_json().startswith(b'{"topicName":"persistent://t/ns/x","ledgerComponent":"MANAGED_LEDGER"')


def test_still_referenced_wins_over_everything_but_transient() -> None:
    facts = Facts(NOW, references=("listed in the managed ledger",), bookkeeper=bk(state="OPEN"))
    assert decision.decide(req(reason="manual"), facts, POLICY).verdict == Verdict.ACK_IN_USE
    assert decision.decide(req(reason="orphan"), facts, POLICY).verdict == Verdict.ACK_IN_USE


@pytest.mark.parametrize("reason", ["trim", "topic-deleted"])
def test_mark_phase_request_still_listed_is_looked_at_again_within_the_grace(reason: str) -> None:
    """trim sends, *then* writes: a request consumed in between must not be acked "in use"
    (the ledger would leave the list a moment later with no request left: an orphan)."""
    listed = Facts(NOW, attempts=50, references=("listed in the managed ledger",), bookkeeper=bk())
    # first sight: the grace begins now (this daemon's clock), whatever markedAt says — a trim
    # host whose clock is a day behind still gets its window
    for marked_at in (NOW - 10_000, NOW - DAY_MS, NOW + 3_600_000):
        fresh = decision.decide(req(reason=reason, markedAt=marked_at), listed, POLICY)
        assert (fresh.verdict, fresh.kind) == (Verdict.RECONSUME, Kind.IN_USE_GRACE)
        assert fresh.delay_s == POLICY.in_use_grace_s and fresh.grace_since_ms == NOW
    # seen again within the grace: waits only what is left of it, the start carried unchanged
    again = decision.decide(req(reason=reason), replace(listed, grace_since_ms=NOW - 10_000), POLICY)
    assert again.verdict == Verdict.RECONSUME and again.delay_s == POLICY.in_use_grace_s - 10
    assert again.grace_since_ms == NOW - 10_000
    # past the grace the mark phase crashed or aborted: the ledger really is in use
    old = decision.decide(req(reason=reason), replace(listed, grace_since_ms=NOW - 301_000), POLICY)
    assert old.verdict == Verdict.ACK_IN_USE
    # a start from the future is not believed (else a forged one would loop forever): it restarts now
    future = decision.decide(req(reason=reason), replace(listed, grace_since_ms=NOW + 3_600_000), POLICY)
    assert future.verdict == Verdict.RECONSUME and future.grace_since_ms == NOW
    # the grace can be switched off
    off = decision.decide(req(reason=reason), listed, Policy(in_use_grace_s=0))
    assert off.verdict == Verdict.ACK_IN_USE


def test_no_delay_exceeds_what_config_allows() -> None:
    """A ctime far in the future (clock skew, or a forged znode) must not park a request for a
    year, nor overflow the client's delay type."""
    skewed = bk(ctime=NOW + 400 * 365 * DAY_MS)
    action = decision.decide(req(reason="orphan"), Facts(NOW, bookkeeper=skewed), POLICY)
    assert action.verdict == Verdict.RECONSUME and action.delay_s <= POLICY.max_delay_s
    assert POLICY.max_delay_s == max(POLICY.reconsume_later_s, POLICY.in_use_grace_s, POLICY.min_ledger_age_s)


@pytest.mark.parametrize("custom,component,extra,fragment", [
    ({**ML, "application": "kafka"}, "MANAGED_LEDGER", {}, "not a Pulsar ledger"),
    ({k: v for k, v in ML.items() if k != "application"}, "MANAGED_LEDGER", {}, "not a Pulsar ledger"),
    ({**ML, "pulsar/managed-ledger": "t/ns/persistent/other"}, "MANAGED_LEDGER", {}, "managed ledger differs"),
    ({**ML, "pulsar/cursor": "sub"}, "MANAGED_LEDGER", {}, "cursor ledger"),
    (ML, "MANAGED_CURSOR", {"cursorName": "sub"}, "cursor differs"),
    ({**ML, "pulsar/cursor": "other"}, "MANAGED_CURSOR", {"cursorName": "sub"}, "cursor differs"),
    (ML, "SCHEMA_STORAGE", {"schemaId": "t/ns/orders"}, "component='managed-ledger'"),
    ({"application": "pulsar", "component": "schema", "pulsar/schemaId": "t/ns/x"}, "SCHEMA_STORAGE",
     {"schemaId": "t/ns/orders"}, "schema id differs"),
    ({"application": "pulsar", "component": "compacted-ledger"}, "MANAGED_LEDGER", {}, "compacted-ledger"),
])
def test_metadata_mismatch_is_acked_never_deleted(custom: dict, component: str, extra: dict, fragment: str) -> None:
    action = decision.decide(req(ledgerComponent=component, **extra), Facts(NOW, bookkeeper=bk(custom)), POLICY)
    assert action.verdict == Verdict.ACK_MISMATCH
    assert fragment in action.reason


@pytest.mark.parametrize("component,extra,custom", [
    ("MANAGED_LEDGER", {}, ML),
    ("MANAGED_CURSOR", {"cursorName": "sub"}, {**ML, "pulsar/cursor": "sub"}),
    ("SCHEMA_STORAGE", {"schemaId": "t/ns/orders"},
     {"application": "pulsar", "component": "schema", "pulsar/schemaId": "t/ns/orders"}),
])
def test_verified_ledgers_are_deleted_at_their_version(component: str, extra: dict, custom: dict) -> None:
    action = decision.decide(req(ledgerComponent=component, **extra), Facts(NOW, bookkeeper=bk(custom)), POLICY)
    assert action == Action(Verdict.DELETE_BOOKKEEPER, "verified", bookkeeper_version=4)


@pytest.mark.parametrize("state", ["OPEN", "IN_RECOVERY"])
def test_open_ledgers_wait(state: str) -> None:
    action = decision.decide(req(), Facts(NOW, bookkeeper=bk(state=state)), POLICY)
    assert action.verdict == Verdict.RECONSUME and action.delay_s == 600 and state in action.reason
    exhausted = decision.decide(req(), Facts(NOW, attempts=3, bookkeeper=bk(state=state)), POLICY)
    assert exhausted.verdict == Verdict.DLQ and exhausted.kind == "max-retries-reached"


@pytest.mark.parametrize("reason", ["orphan", "manual", "trim", "topic-deleted"])
def test_young_ledgers_wait_until_old_enough_unless_the_facts_prove_them_superseded(reason: str) -> None:
    """The reason is a claim: it buys nothing.  Only a proof read from the
    metadata (the owner already records a newer ledger, or is gone) lets a young ledger go."""
    young = bk(ctime=NOW - 3_600_000)  # an hour old
    action = decision.decide(req(reason=reason), Facts(NOW, bookkeeper=young), POLICY)
    assert action.verdict == Verdict.RECONSUME and action.kind == Kind.NOT_YET
    assert action.delay_s == pytest.approx(86_400 - 3_600)
    proven = Facts(NOW, bookkeeper=young, superseded="t/ns/orders already lists newer ledger 9")
    assert decision.decide(req(reason=reason), proven, POLICY).verdict == Verdict.DELETE_BOOKKEEPER


def test_age_falls_back_to_znode_ctime() -> None:
    no_ctime = bk(ctime=None)  # znode ctime three days ago
    assert decision.decide(req(reason="orphan"), Facts(NOW, bookkeeper=no_ctime), POLICY).verdict == (
        Verdict.DELETE_BOOKKEEPER)


def test_absent_is_success() -> None:
    action = decision.decide(req(), Facts(NOW, bookkeeper=BookKeeperFact("/ledgers/00/0000/L0007")), POLICY)
    assert action.verdict == Verdict.ACK_ABSENT


def test_unreadable_metadata_goes_to_dlq_not_deleted() -> None:
    f = Facts(NOW, bookkeeper=BookKeeperFact("/p", unreadable="garbage", version=1))
    assert decision.decide(req(), f, POLICY).verdict == Verdict.DLQ
    assert decision.decide(req(), Facts(NOW, unverifiable="cursor unreadable"), POLICY).kind == "cannot-verify"


def test_transient_gathering_failure_reconsumes_then_dead_letters() -> None:
    assert decision.decide(req(), Facts(NOW, attempts=2, transient="zk down"), POLICY).verdict == Verdict.RECONSUME
    action = decision.decide(req(), Facts(NOW, attempts=3, transient="zk down"), POLICY)
    assert action.verdict == Verdict.DLQ and "zk down" in action.reason


OFFLOAD = {"ledgerType": "OFFLOAD_LEDGER",
           "offloadContext": {"uidMsb": 1, "uidLsb": 2, "driverName": "aws-s3", "driverMetadata": {"bucket": "b"}}}


@pytest.mark.parametrize("fact,verdict", [
    (OffloadFact(not_allowed="bucket 'x' not allowed"), Verdict.ACK_MISMATCH),
    (OffloadFact(index_mismatch="index is for another ledger", present=True), Verdict.ACK_MISMATCH),
    (OffloadFact(target_error="bucket missing"), Verdict.DLQ),
    (OffloadFact(present=False), Verdict.ACK_ABSENT),
    (OffloadFact(present=True, unverifiable="index names no managed ledger", oldest_object_ms=0), Verdict.DLQ),
    (OffloadFact(present=True, verified="ok", oldest_object_ms=NOW - 2 * DAY_MS),
     Verdict.DELETE_OFFLOAD),
])
def test_offload_rows(fact: OffloadFact, verdict: Verdict) -> None:
    assert decision.decide(req(**OFFLOAD), Facts(NOW, offload=fact), POLICY).verdict == verdict


@pytest.mark.parametrize("reason", ["orphan", "trim"])
def test_young_offloaded_copy_waits_unless_superseded(reason: str) -> None:
    fact = OffloadFact(present=True, verified="ok", oldest_object_ms=NOW - 1000)
    assert decision.decide(req(reason=reason, **OFFLOAD), Facts(NOW, offload=fact), POLICY).verdict == (
        Verdict.RECONSUME)
    proven = Facts(NOW, offload=fact, superseded="its offload context now names a later offload")
    assert decision.decide(req(reason=reason, **OFFLOAD), proven, POLICY).verdict == Verdict.DELETE_OFFLOAD


# Every delete result, for each delete verdict, settles into the disposition the table says.
DELETE_RESULTS = [DeleteResult(DeleteStatus.DELETED), DeleteResult(DeleteStatus.ABSENT),
                  DeleteResult(DeleteStatus.BAD_VERSION), DeleteResult(DeleteStatus.TRANSIENT, "timeout"),
                  DeleteResult(DeleteStatus.FAILED, "access denied"), DeleteResult(DeleteStatus.DRY_RUN)]
EXPECTED = {  # status -> (verdict, kind), for the statuses that do not depend on the retry budget
    DeleteStatus.ABSENT: (Verdict.ACK_ABSENT, Kind.NONE),
    DeleteStatus.FAILED: (Verdict.DLQ, Kind.DELETE_FAILED),
    DeleteStatus.DRY_RUN: (Verdict.DRY_RUN, Kind.NONE),
}


@pytest.mark.parametrize("verdict,result,attempts", list(itertools.product(
    [Verdict.DELETE_BOOKKEEPER, Verdict.DELETE_OFFLOAD], DELETE_RESULTS, [0, 3])))
def test_every_delete_result_settles(verdict: Verdict, result: DeleteResult, attempts: int) -> None:
    final = decision.settle_delete(Action(verdict, "verified", bookkeeper_version=1), result, attempts, POLICY)
    if result.status == DeleteStatus.DELETED:
        expected = (verdict, Kind.NONE)
    elif result.status in EXPECTED:
        expected = EXPECTED[result.status]
    elif attempts < POLICY.max_retries:  # bad version and transient: retried until the budget is spent
        expected = (Verdict.RECONSUME, Kind.TRANSIENT)
    else:
        expected = (Verdict.DLQ, Kind.MAX_RETRIES)
    assert (final.verdict, final.kind) == expected
    if final.verdict == Verdict.RECONSUME:
        assert final.delay_s == POLICY.reconsume_later_s
    if result.status == DeleteStatus.FAILED:
        assert "access denied" in final.reason
    if result.status == DeleteStatus.DRY_RUN:
        assert outcome_of(final) == Outcome.WOULD_DELETE


def test_with_evidence_keeps_every_field() -> None:
    """``Action.with_evidence`` names the fields one by one (for speed): a field added to ``Action`` and
    not there would be dropped from every settled action.  Each field gets a value unlike its default."""
    action = Action(Verdict.RECONSUME, "why", delay_s=7.5, bookkeeper_version=3, kind=Kind.TRANSIENT,
                    cause=Kind.NOT_YET, counts=False, grace_since_ms=123)
    assert {f.name for f in fields(Action)} == {
        "verdict", "reason", "delay_s", "bookkeeper_version", "kind", "cause", "counts", "grace_since_ms", "evidence"}
    evidence = Evidence(bk_version=3, references=("a",))
    got = action.with_evidence(evidence)
    assert got == replace(action, evidence=evidence)
    assert all(getattr(got, f.name) == getattr(action, f.name) for f in fields(Action)
               if f.name != "evidence")
    assert got.evidence is evidence
