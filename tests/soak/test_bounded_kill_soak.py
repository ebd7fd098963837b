"""The bounded kill soak CI runs: 15 SIGKILLs of the real CLI processes.

Every failpoint comes up once and a third of the kills land at random moments (daemon, a
running trim, the embedded broker), on real ZooKeeper, the embedded broker and moto_server.
The judge reads the stores itself (``tests/support/soak/cluster.py``) and every audit trail (no request
named deleted twice).  ``scripts/soak_long.sh`` runs it with 30 (every failpoint twice) and
``scripts/soak.py --kills 1000`` is the long run of the same engine (``--replicas 3``: three
daemons on one external broker; no replicas variant here: its drain alone waits out two of the
broker's metric refreshes, and a run with one kill costs more than a minute).  ``SOAK_KILLS`` sets
the count; ``SOAK_SEED`` replays a run's choices; the seed is printed either way.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from deletion_service.embedded.broker import EmbeddedBroker, pids_serving, stop_pid
from deletion_service.failpoints import POINTS
from tests.support.soak.fleet import deleted_twice
from tests.support.soak.run import run_soak

KILLS = int(os.environ.get("SOAK_KILLS") or 15)  # plan(15): each of the 10 failpoints once, 5 random kills
SEED = int(os.environ.get("SOAK_SEED") or random.SystemRandom().randrange(2**31))


# A kill that lands while the daemon deletes an offloaded copy leaves that copy's claim behind; by design
# nobody takes it over before its life and the clock margin have passed (60 + 150 s,
# deletion_service/delete_phase/storage/offload_claims.py), so the drain waits that long for it, and
# the 15 faults before it take one to three minutes on a loaded machine: more than the suite's 300 s.
@pytest.mark.timeout(720)
def test_bounded_kill_soak_keeps_both_invariants_and_leaks_nothing() -> None:
    print(f"SOAK_SEED={SEED}")
    result = run_soak(KILLS, SEED)
    print(json.dumps(result))
    why = json.dumps({k: result[k] for k in ("violations", "notes", "missedFailpoints", "drain")}, indent=1)
    assert result["wronglyDeleted"] == 0, why
    assert result["orphansLeft"] == 0, why
    assert result["deletedTwice"] == 0, why
    assert result["leakedProcesses"] == 0, why
    assert set(result["failpoints"]) == set(POINTS), why
    assert result["kills"] >= KILLS * 0.9, why  # a random kill may find no trim running: rare, tolerated
    assert result["drain"]["exit"] == 0, why
    assert result["deleted"] > 0 and result["requests"] > 0
    assert result["daemonShutdownSeconds"].get("max", 0) <= 20, why


def test_the_judge_sees_a_request_deleted_by_two_replicas_and_not_a_ledger_and_its_offloaded_copy(
        tmp_path: Path) -> None:
    """The third invariant's judge reads every data dir's trail: one request ``deleted`` in two trails is
    named; a LEDGER and an OFFLOAD_LEDGER request for one ledger, or a ``deleted`` then ``absent``, are not."""
    ledger = {"topicName": "persistent://t/n/a", "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER",
              "ledgerId": 7, "offloadContext": None}
    copy = {**ledger, "ledgerType": "OFFLOAD_LEDGER", "offloadContext": {"uidMsb": 1, "uidLsb": 2}}
    trails = {"r0": [(ledger, "deleted"), (copy, "absent")], "r1": [(copy, "deleted"), (ledger, "absent")]}
    for name, records in trails.items():
        (tmp_path / name / "audit").mkdir(parents=True)
        (tmp_path / name / "audit" / "audit-1.jsonl").write_text("".join(
            json.dumps({"request": request, "outcome": outcome}) + "\n" for request, outcome in records))
    dirs = [tmp_path / "r0", tmp_path / "r1"]
    assert deleted_twice(dirs) == []
    with (tmp_path / "r1" / "audit" / "audit-1.jsonl").open("a") as trail:
        trail.write(json.dumps({"request": ledger, "outcome": "deleted"}) + "\n")
    key = ("persistent://t/n/a", "MANAGED_LEDGER", "LEDGER", 7, None, None)
    assert deleted_twice(dirs) == [f"deleted 2 times: {key}"]


def test_a_command_exiting_after_a_daemon_replaced_its_broker_leaves_the_daemons_record(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    command = EmbeddedBroker(data_dir)  # trim/enqueue with no daemon running: starts a temporary broker
    command.ensure()
    daemon = EmbeddedBroker(data_dir)  # then `run` starts: it replaces that broker with its own
    daemon.claim("a ledger-deletion daemon (run or demo)")
    try:
        mine = daemon.replace()
        command.stop()  # the command exits and stops "its" broker
        assert daemon.read_info() == mine, "the daemon's broker.json was deleted by another command's exit"
        assert EmbeddedBroker(data_dir).ensure() == mine  # the next trim reuses the daemon's broker
    finally:
        daemon.stop()
        daemon.daemon_lock.release()
        for pid in pids_serving(daemon.db_path):
            stop_pid(pid)
