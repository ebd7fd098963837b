"""What the daemon tells an operator: structured JSON log fields, a periodic summary, --log-level,
and why --exit-when-idle is still waiting (through the real CLI and the real embedded broker)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from metastore import open_store
from tests.support.cli_runner import run_cli
from tests.support.daemon_ledgers import TOPIC, request_file, seed
from tests.support.harness import free_port


def _enqueue(data_dir: Path, tmp_path: Path, ids: range) -> None:
    r = run_cli("enqueue", "--from-file", str(request_file(tmp_path / "r.jsonl", ids)), "--data-dir", str(data_dir))
    assert r.returncode == 0, r.stderr


def _run(data_dir: Path, *extra: str):  # noqa: ANN202
    return run_cli("run", "--exit-when-idle", "--data-dir", str(data_dir), "--admin-address",
                   f"127.0.0.1:{free_port()}", *extra, timeout=120)


def test_json_logs_carry_fields_and_a_summary_and_say_nothing_twice(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    ids = range(1, 4)
    seed(f"sqlite:///{data_dir / 'metadata.db'}", ids)
    _enqueue(data_dir, tmp_path, ids)
    r = _run(data_dir, "--max-wait", "60", "--log-format", "json", "--summary-every", "1", "--log-level", "debug")
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stderr.splitlines() if line.startswith("{")]
    # at INFO, a batch's deletions share a line naming each ledger; each request's own line is at DEBUG
    batched = [x for x in lines if x.get("outcome") == "deleted" and x["level"] == "info"]
    assert sorted(lid for x in batched for lid in x["ledgers"]) == list(ids)
    assert all(x["topic"] == TOPIC and x["ledgerType"] == "LEDGER" and x["count"] == len(x["ledgers"])
               for x in batched)
    deleted = [x for x in lines if x.get("outcome") == "deleted" and x["level"] == "debug"]
    assert sorted(x["ledger"] for x in deleted) == list(ids)
    assert all(x["topic"] == TOPIC and x["ledgerType"] == "LEDGER" and x["attempts"] == 0 for x in deleted)
    # message ids as the CLI shows and takes them (ledger:entry[:partition[:batch]]), not the client's (L,E,P,B)
    assert all(re.fullmatch(r"\d+:\d+(:\d+){0,2}", x["messageId"]) for x in deleted), deleted
    assert not any("deleted (deleted)" in x["msg"] for x in lines)
    summaries = [x for x in lines if "summary" in x]
    assert summaries and sum(s["summary"]["deleted"] for s in summaries) <= len(ids)
    assert all(s["msg"].startswith("last ") and "dependencies: ok" in s["msg"] for s in summaries)


def test_log_level_warning_keeps_the_info_lines_out(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    seed(f"sqlite:///{data_dir / 'metadata.db'}", range(1, 2))
    _enqueue(data_dir, tmp_path, range(1, 2))
    r = _run(data_dir, "--max-wait", "60", "--log-level", "warning")
    assert r.returncode == 0, r.stderr
    assert " INFO " not in r.stderr and "delete phase running" not in r.stderr


def test_exit_when_idle_says_how_many_it_waits_for_and_until_when(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    url = f"sqlite:///{data_dir / 'metadata.db'}"
    with open_store(url) as store:
        writer = ClusterWriter(store)
        writer.ensure_layout()
        for lid in (1, 2):
            writer.bk_ledger(lid, pulsar_custom_metadata(TOPIC), state="OPEN")  # not yet: reconsumed
    _enqueue(data_dir, tmp_path, range(1, 3))
    cfg = tmp_path / "c.toml"
    cfg.write_text("twoPhaseDeletionReconsumeLaterInSeconds = 300\n")
    r = _run(data_dir, "--max-wait", "8", "--config", str(cfg))
    assert r.returncode == 3, r.stderr
    assert "waiting out retry delays: 2 request(s) held, the last due at " in r.stderr


def test_status_shows_what_is_in_hand_and_the_last_problems(tmp_path: Path) -> None:
    """A request for an open ledger is held for its retry delay: status says so, with until when."""
    import signal

    from tests.support.daemon_process import answers, start_daemon
    from tests.support.harness import wait_until

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    with open_store(f"sqlite:///{data_dir / 'metadata.db'}") as store:
        writer = ClusterWriter(store)
        writer.ensure_layout()
        writer.bk_ledger(1, pulsar_custom_metadata(TOPIC), state="OPEN")
    _enqueue(data_dir, tmp_path, range(1, 2))
    cfg = tmp_path / "c.toml"
    cfg.write_text("twoPhaseDeletionReconsumeLaterInSeconds = 300\n")
    port = free_port()
    proc = start_daemon(data_dir, "--config", str(cfg), port=port)
    address = f"127.0.0.1:{port}"
    try:
        wait_until(lambda: answers(f"http://{address}/healthz"), 60, "the daemon", proc=proc)

        def held() -> bool:
            r = run_cli("status", "--admin-address", address, "--json")
            return r.returncode == 0 and json.loads(r.stdout)["inHand"].get("held") == 1

        wait_until(held, 60, "the request held for its retry delay", proc=proc, interval=0.5)
        answer = json.loads(run_cli("status", "--admin-address", address, "--json").stdout)
        assert answer["inHand"]["heldUntil"] is not None and answer["inHand"]["dependenciesDown"] is None
        assert set(answer["dependencies"]) >= {"metadataStore", "broker"}
        assert all(v == "ok" for v in answer["dependencies"].values())
        table = run_cli("status", "--admin-address", address)
        assert table.returncode == 0 and "held" in table.stdout and "heldUntil" in table.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    run_cli("status", "--admin-address", address).assert_one_line_error(1, "no daemon answers", address)
