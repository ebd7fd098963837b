"""``status``'s recent problems keep one entry per kind: a flood of one kind, whatever a tenant chose to
send, is one entry with its count, and the warning that matters stays."""

from __future__ import annotations

import logging

from deletion_service.logs import RecentProblems


def _logger(handler: RecentProblems) -> logging.Logger:
    log = logging.getLogger("recent-problems-test")
    log.handlers[:] = [handler]
    log.propagate = False
    log.setLevel(logging.INFO)
    return log


def test_a_flood_of_one_kind_is_one_entry_and_the_others_stay() -> None:
    recent = RecentProblems(keep=5)
    log = _logger(recent)
    log.error("the audit trail cannot be written (%s): deleting no further batch", "disk full")
    for i in range(50):
        log.warning("%s: %s%s", f"ledger {i} of persistent://t/ns/x", "metadata_mismatch", f" (cursor x{i}[/])",
                    extra={"outcome": "metadata_mismatch"})
    for reason in ("invalid-request", "cross-namespace"):
        log.warning("parked %d request(s) in the DLQ, reason %s", 3, reason, extra={"outcome": "dlq", "reason": reason})
    log.info("not a problem")
    kept = recent.records
    assert [r["msg"] for r in kept][0].startswith("the audit trail cannot be written")
    mismatch = [r for r in kept if "metadata_mismatch" in str(r["msg"])]
    assert len(mismatch) == 1 and mismatch[0]["repeated"] == 50 and "x49" in str(mismatch[0]["msg"])
    assert sorted(str(r["msg"]).rsplit(" ", 1)[-1] for r in kept if "DLQ" in str(r["msg"])) == [
        "cross-namespace", "invalid-request"]  # each DLQ reason its own entry
    assert len(kept) == 4


def test_only_the_oldest_kinds_go_past_the_limit() -> None:
    recent = RecentProblems(keep=3)
    log = _logger(recent)
    for kind in ("a", "b", "c", "a", "d"):
        log.warning(f"problem {kind} %s", kind)
    assert [r["msg"] for r in recent.records] == ["problem c c", "problem a a", "problem d d"]
