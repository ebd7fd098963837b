"""``dlq purge`` and ``dlq requeue`` leave audit records, through the real CLI on the embedded broker:
one record per request in the data dir's trail, naming the request, the operator's action, the
message it was and when; the chain stays whole (``audit verify``)."""

from __future__ import annotations

import getpass
import json
import time

from tests.support.parked_requests import Parked, parked

__all__ = ["parked"]  # the fixture: a data dir whose DLQ holds four parked requests


def _records(p: Parked) -> list[dict]:
    r = p.cli("--json", "audit")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_purge_and_a_requeue_each_leave_records_naming_the_request_the_action_and_the_time(parked: Parked) -> None:
    p = parked
    before_ms = int(time.time() * 1000)
    purged_id, requeued_id, undecodable_id = p.ids[1], p.ids[2], p.ids[9]
    r = p.cli("--json", "dlq", "purge", "--yes", purged_id, undecodable_id)
    assert r.returncode == 0, r.stderr
    r = p.cli("--json", "dlq", "requeue", requeued_id)
    assert r.returncode == 0, r.stderr
    after_ms = int(time.time() * 1000)

    records = _records(p)
    by_outcome = {o: [rec for rec in records if rec["outcome"] == o] for o in ("purged", "requeued")}
    assert len(by_outcome["purged"]) == 2 and len(by_outcome["requeued"]) == 1, records
    purged = next(rec for rec in by_outcome["purged"] if rec["request"] is not None)
    undecodable = next(rec for rec in by_outcome["purged"] if rec["request"] is None)
    [requeued] = by_outcome["requeued"]
    assert purged["request"]["ledgerId"] == 1 and requeued["request"]["ledgerId"] == 2
    for rec, message_id, command in ((purged, purged_id, "dlq purge"), (undecodable, undecodable_id, "dlq purge"),
                                     (requeued, requeued_id, "dlq requeue")):
        assert f"{command} by {getpass.getuser()}@" in rec["reason"], rec["reason"]
        assert f"message {message_id} left " in rec["reason"], rec["reason"]
        assert before_ms <= rec["at"] <= after_ms
        assert rec["evidence"] == {"bkVersion": None, "customMetadata": {}, "references": [], "offloadObjects": []}
    assert "parked for delete-failed" in purged["reason"]
    assert "undecodable payload" in undecodable["reason"] and "sha256" in undecodable["reason"]
    assert "sent back to persistent://pulsar/system/__ledger_deletion-partition-" in requeued["reason"]
    assert [rec["seq"] for rec in records] == sorted(rec["seq"] for rec in records)
    r = p.cli("--json", "audit", "--outcome", "purged", "--outcome", "requeued")  # an operator's filter finds them
    assert r.returncode == 0, r.stderr
    assert sorted(rec["seq"] for rec in json.loads(r.stdout)) == sorted(
        rec["seq"] for rec in by_outcome["purged"] + by_outcome["requeued"])

    r = p.cli("--json", "audit", "verify")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["whole"] is True
    # the purged and requeued requests left the DLQ; the one nobody touched stays
    assert [e["messageId"] for e in p.listed()] == [p.ids[3]]


def test_a_purge_whose_records_cannot_be_written_drops_nothing(parked: Parked) -> None:
    p = parked
    (p.data_dir / "audit").write_text("a file where the trail's directory belongs: every record is refused")
    r = p.cli("dlq", "purge", "--yes", p.ids[1])
    r.assert_one_line_error(1, "nothing left the DLQ", "audit trail")
    assert p.ids[1] in [e["messageId"] for e in p.listed()]
