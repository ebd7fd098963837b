"""The offload index judgement, row by row, without servers: facts in, verdict out."""

from __future__ import annotations

import pytest

from deletion_service.delete_phase.rules.verify_offload import (
    IndexCheck,
    IndexExpectation,
    Verification,
    combine,
    judge_index,
)
from offloaders.index_format import SegmentLedgerInfo, SourceLedgerMetadata
from offloaders.interface import IndexFacts, IndexKind, IndexRef, IndexState

ML = "t/ns/persistent/orders"
LEDGER_REF = IndexRef(IndexKind.LEDGER, "u-ledger-7-index", "u-ledger-7")
SEGMENT_REF = IndexRef(IndexKind.SEGMENT, "s-index", "s")


def source(ml: str | None = ML) -> SourceLedgerMetadata:
    return SourceLedgerMetadata(length=10, last_entry_id=4, custom={"pulsar/managed-ledger": ml.encode()} if ml else {})


@pytest.mark.parametrize(("state", "verdict"), [
    (IndexState.ABSENT, Verification.ABSENT),
    (IndexState.INDEX_MISSING, Verification.UNVERIFIABLE),
    (IndexState.UNDECODED, Verification.UNVERIFIABLE),
    (IndexState.MALFORMED, Verification.MISMATCH),
])
def test_states_that_were_not_read(state: IndexState, verdict: Verification) -> None:
    check = judge_index(IndexFacts(LEDGER_REF, state, "what the offloader saw"), 7, None, ML)
    assert (check.outcome, check.detail, check.checked) == (verdict, "what the offloader saw", (LEDGER_REF.index_name,))


def test_per_ledger_index_must_name_the_expected_managed_ledger() -> None:
    read = IndexFacts(LEDGER_REF, IndexState.READ, source=source())
    assert judge_index(read, 7, IndexExpectation(managed_ledger_name=ML)).owner == ML
    assert judge_index(read, 7, None, "t/ns/persistent/other").outcome is Verification.MISMATCH
    # no expectation and no target name: nothing to compare with
    assert judge_index(read, 7).outcome is Verification.UNVERIFIABLE
    # an index naming no managed ledger proves nothing, unless the object metadata does
    bare = IndexFacts(LEDGER_REF, IndexState.READ, source=source(None))
    assert judge_index(bare, 7, None, ML).outcome is Verification.UNVERIFIABLE
    stamped = IndexFacts(LEDGER_REF, IndexState.READ, source=source(None), object_ml_name=ML)
    assert judge_index(stamped, 7, None, ML).outcome is Verification.VERIFIED
    # the directory a filesystem offload sits under is what it is expected to name
    placed = IndexFacts(LEDGER_REF, IndexState.READ, source=source(), location_ml_name="t/ns/persistent/other")
    assert judge_index(placed, 7, None, ML).outcome is Verification.MISMATCH


def test_segment_index_needs_the_object_metadata_to_name_its_topic() -> None:
    ledgers = {7: SegmentLedgerInfo(7, 5, 50)}
    unnamed = IndexFacts(SEGMENT_REF, IndexState.READ, ledgers=ledgers)
    assert judge_index(unnamed, 7, None, ML).outcome is Verification.UNVERIFIABLE
    named = IndexFacts(SEGMENT_REF, IndexState.READ, ledgers=ledgers, object_ml_name=ML)
    verified = judge_index(named, 7, None, ML)
    assert (verified.outcome, verified.owner) == (Verification.VERIFIED, ML)
    assert judge_index(named, 8, None, ML).outcome is Verification.MISMATCH


def test_combine() -> None:
    ok_a = IndexCheck(Verification.VERIFIED, "a", ("a",), owner=ML)
    ok_b = IndexCheck(Verification.VERIFIED, "b", ("b",), owner=ML)
    gone = IndexCheck(Verification.ABSENT, "c", ("c",))
    unsure = IndexCheck(Verification.UNVERIFIABLE, "d", ("d",))
    wrong = IndexCheck(Verification.MISMATCH, "e", ("e",))
    assert combine([]).outcome is Verification.UNVERIFIABLE
    assert combine([ok_a, ok_b]) == IndexCheck(Verification.VERIFIED, "a; b", ("a", "b"), owner=ML)
    assert combine([gone, gone]).outcome is Verification.ABSENT
    assert combine([ok_a, gone]).outcome is Verification.VERIFIED
    assert combine([ok_a, unsure]).outcome is Verification.UNVERIFIABLE
    assert combine([unsure, wrong]) is wrong
    other = IndexCheck(Verification.VERIFIED, "f", ("f",), owner="t/ns/persistent/victim")
    assert combine([ok_a, other]).outcome is Verification.MISMATCH
