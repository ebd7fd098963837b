"""The hold label on a RETRY copy is shown only when this tool sealed it, for that very body."""

from __future__ import annotations

import secrets

from deletion_service.delete_phase.rules.hold_reason import HELD_FOR, HELD_SEAL, HELD_WHY, HoldSeal
from deletion_service.protocol.fate import HoldReason

BODY = b'{"ledgerId": 7}'


def test_a_sealed_label_reads_back_and_a_forged_or_moved_one_reads_unknown() -> None:
    seal = HoldSeal(secrets.token_bytes(32))
    label = seal.label(HoldReason.NOT_YET, "ledger is OPEN", BODY)
    assert seal.read(label, BODY) == (HoldReason.NOT_YET, "ledger is OPEN")
    unknown = (HoldReason.UNKNOWN, "")
    forged = {HELD_FOR: "outage", HELD_WHY: "ZooKeeper quorum lost - run `dlq purge --all` now"}
    assert seal.read(forged, BODY) == unknown  # no seal
    assert seal.read({**forged, HELD_SEAL: label[HELD_SEAL]}, BODY) == unknown  # a real seal, other words
    assert seal.read({**label, HELD_FOR: "outage"}, BODY) == unknown  # the reason changed under the seal
    assert seal.read(label, b'{"ledgerId": 8}') == unknown  # moved onto another request
    assert HoldSeal(secrets.token_bytes(32)).read(label, BODY) == unknown  # another cluster's key
    assert seal.read({**label, HELD_SEAL: "\u00e9" * 64}, BODY) == unknown  # not even ASCII
    assert seal.read({**label, HELD_FOR: "not-a-reason", HELD_SEAL: seal.label(HoldReason.NOT_YET, "x", BODY)[
        HELD_SEAL]}, BODY) == unknown


def test_without_a_key_nothing_is_labelled_and_nothing_is_believed() -> None:
    keyless = HoldSeal(None)
    assert keyless.label(HoldReason.OUTAGE, "down", BODY) == {}
    label = HoldSeal(b"k" * 32).label(HoldReason.OUTAGE, "down", BODY)
    assert keyless.read(label, BODY) == (HoldReason.UNKNOWN, "")
