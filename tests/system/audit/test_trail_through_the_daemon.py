"""The audit trail through the real CLI: ``run`` writes it, a restarted ``run`` continues the chain
(across rotated files), and ``audit`` / ``audit verify`` read it back."""

from __future__ import annotations

import json
from pathlib import Path

from deletion_service.cluster_writer import pulsar_custom_metadata
from tests.support.cli_runner import run_cli
from tests.support.daemon_ledgers import TOPIC, present, request_file, seed
from tests.support.daemon_process import data_dir
from tests.support.harness import free_port

__all__ = ["data_dir"]  # the fixture: it stops a broker left behind


def _run_daemon(data: Path) -> None:
    r = run_cli("run", "--exit-when-idle", "--max-wait", "60", "--admin-address", f"127.0.0.1:{free_port()}",
                "--data-dir", str(data), "--set", "ledgerDeletionAuditFileMaxBytes=4096", timeout=120)
    assert r.returncode == 0, r.stderr


def _enqueue(data: Path, tmp_path: Path, ids: range, name: str) -> None:
    r = run_cli("enqueue", "--from-file", str(request_file(tmp_path / name, ids)), "--data-dir", str(data))
    assert r.returncode == 0, r.stderr


def _records(data: Path, *args: str) -> list[dict]:
    r = run_cli("audit", *args, "--json", "--data-dir", str(data))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_run_writes_the_trail_and_a_restart_continues_it(data_dir: Path, tmp_path: Path) -> None:
    data_dir.mkdir()
    url = f"sqlite:///{data_dir / 'metadata.db'}"
    seed(url, range(1, 16), forged=range(100, 103))
    _enqueue(data_dir, tmp_path, range(1, 16), "a.jsonl")
    _enqueue(data_dir, tmp_path, range(100, 103), "forged.jsonl")
    _run_daemon(data_dir)
    first = _records(data_dir)
    assert len(first) == 18 and [r["seq"] for r in first] == list(range(1, 19))
    assert sorted(r["request"]["ledgerId"] for r in first) == [*range(1, 16), *range(100, 103)]
    [five] = _records(data_dir, "--ledger", "5")
    assert five["outcome"] == "deleted" and five["evidence"]["bkVersion"] == 0
    assert five["evidence"]["customMetadata"] == pulsar_custom_metadata(TOPIC)
    assert {r["outcome"] for r in _records(data_dir, "--ledger", "101")} == {"metadata_mismatch"}

    seed(url, range(16, 26))
    _enqueue(data_dir, tmp_path, range(16, 26), "b.jsonl")
    _run_daemon(data_dir)
    every = _records(data_dir)
    assert [r["seq"] for r in every] == list(range(1, 29)), "a restarted daemon continues the chain"
    assert every[:18] == first
    assert len({r["daemon"] for r in every[:18]}) == 1 and every[18]["daemon"] != every[0]["daemon"]
    assert present(url, range(1, 26)) == []
    files = sorted((data_dir / "audit").glob("audit-*.jsonl"))
    assert len(files) > 2 and all(f.stat().st_size <= 4096 for f in files), "4 KiB files rotate"
    r = run_cli("audit", "verify", "--data-dir", str(data_dir))
    assert r.returncode == 0 and "28 record(s)" in r.stdout, r.stdout + r.stderr
    r = run_cli("audit", "--topic", TOPIC, "--since", "1h", "--data-dir", str(data_dir))
    assert r.returncode == 0 and "28 audit record(s)" in r.stdout, r.stdout  # the forged ones name it too


def test_a_daemon_killed_between_a_delete_and_its_ack_has_already_recorded_it(
        data_dir: Path, tmp_path: Path) -> None:
    """The record is written before the ack: a SIGKILL right before the ack loses no record.  The
    redelivered request then settles as absent, and the trail shows both (a repeat, never a gap)."""
    data_dir.mkdir()
    url = f"sqlite:///{data_dir / 'metadata.db'}"
    seed(url, range(1, 2))
    _enqueue(data_dir, tmp_path, range(1, 2), "a.jsonl")
    killed = run_cli("run", "--exit-when-idle", "--max-wait", "60", "--admin-address", f"127.0.0.1:{free_port()}",
                     "--data-dir", str(data_dir), env={"LEDGER_DELETION_FAILPOINTS": "delete.before-ack=kill"},
                     timeout=120)
    assert killed.returncode == -9, killed.stderr
    assert present(url, range(1, 2)) == []
    assert [r["outcome"] for r in _records(data_dir, "--ledger", "1")] == ["deleted"]
    _run_daemon(data_dir)
    assert [r["outcome"] for r in _records(data_dir, "--ledger", "1")] == ["deleted", "absent"]
    r = run_cli("audit", "verify", "--data-dir", str(data_dir))
    assert r.returncode == 0, r.stdout + r.stderr
