"""``ledger-deletion demo`` end to end on the embedded defaults, as the README's first command runs it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli_runner import run_cli


def test_demo_runs_both_phases_and_reports_every_ending(tmp_path: Path) -> None:
    r = run_cli("demo", "--json", cwd=tmp_path, timeout=180)  # no options at all: ./ledger-deletion-data
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    # What demo.build() put there, and how each request must end:
    assert s["removedByTrim"] > 0
    # trimmed minus BookKeeper copies already gone, the orphans, and the one a one-phase broker leaked
    assert s["deletedLedgers"] == s["removedByTrim"] - 6 + 20 + 1
    assert s["leaksCaught"] == 1  # requested by the leak watcher (reason leaked), verified and deleted
    assert s["deletedOffloadedCopies"] == 15  # five offloaded ledgers on each of three topics
    assert s["stillInUse"] == 6 and s["metadataMismatch"] == 4
    assert s["alreadyAbsent"] == 3 and s["deadLettered"] == 2 and s["waitingTooYoung"] == 3
    assert (tmp_path / "ledger-deletion-data" / "metadata.db").exists()
    assert not (tmp_path / "ledger-deletion-data" / "broker" / "broker.json").exists()  # broker stopped with it
    dlq = run_cli("dlq", "list", "--json", cwd=tmp_path)
    assert dlq.returncode == 0, dlq.stderr
    assert sorted(e["reason"] for e in json.loads(dlq.stdout)) == ["invalid-request", "max-retries-reached"]


def test_demo_for_people(tmp_path: Path) -> None:
    r = run_cli("demo", "--data-dir", str(tmp_path / "d"), cwd=tmp_path, timeout=180, env={"COLUMNS": "120"})
    assert r.returncode == 0, r.stderr
    assert "deleted ledgers" in r.stdout and "dead-lettered" in r.stdout and "WARNING" not in r.stderr
    # the closing hints name the data dir as an absolute path, so they work from any directory
    assert f"ledger-deletion --data-dir {tmp_path / 'd'} dlq list" in r.stdout
