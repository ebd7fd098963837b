"""an operator's day after ``demo``: held requests say why they wait and until when (the
date, since it is tomorrow), the demo leaves an audit trail and next steps that finish, and the
daemon's figures agree with ``status``, ``dlq list`` and one another.

One demo (a few seconds) feeds every check; the daemon runs as operators run it (``run``,
embedded broker), read through its admin API and ``/metrics``.
"""

from __future__ import annotations

import json
import re
import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from deletion_service.clock_text import local_moment
from deletion_service.embedded.broker import pids_serving, stop_pid
from tests.support.alert_rules import PROMTOOL, promtool_firing
from tests.support.cli_runner import run_cli
from tests.support.daemon_process import answers, start_daemon
from tests.support.harness import free_port, wait_until
from tests.support.metrics_scrape import metric


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


@pytest.fixture(scope="module")
def after_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict]]:
    data_dir = tmp_path_factory.mktemp("after-demo") / "data"
    r = run_cli("demo", "--json", "--data-dir", str(data_dir), timeout=180)
    assert r.returncode == 0, r.stderr
    try:
        yield data_dir, json.loads(r.stdout)
    finally:
        for pid in pids_serving(data_dir.absolute() / "broker" / "db"):
            stop_pid(pid)


def test_a_moment_on_another_day_carries_its_date() -> None:
    now = time.mktime((2026, 11, 25, 16, 0, 0, 0, 0, -1))
    assert local_moment(now + 60, now) == "16:01:00"
    assert local_moment(now + 86_400 + 89, now) == "2026-11-26 16:01:29"


def test_the_demo_says_until_when_the_young_requests_wait_and_suggests_steps_that_finish(tmp_path: Path) -> None:
    r = run_cli("demo", "--data-dir", str(tmp_path / "d"), timeout=180, env={"COLUMNS": "200"})
    try:
        assert r.returncode == 0, r.stderr
        assert re.search(r"3 request\(s\) wait in RETRY until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d: their ledgers are "
                         r"younger than minLedgerAgeSeconds", r.stdout), r.stdout
        hints = [line.split(str(tmp_path / "d"), 1)[1].strip() for line in r.stdout.splitlines()
                 if line.strip().startswith("ledger-deletion --data-dir")]
        assert "run --exit-when-idle" not in hints, "waits a day for the young requests, silently"
        assert "run --exit-when-idle --max-wait 15" in hints and "audit --limit 10" in hints
    finally:
        for pid in pids_serving((tmp_path / "d").absolute() / "broker" / "db"):
            stop_pid(pid)


def test_the_demo_writes_an_audit_trail_read_newest_first_limited_and_by_outcome(after_demo: tuple) -> None:
    data_dir, summary = after_demo
    everything = json.loads(run_cli("audit", "--json", "--data-dir", str(data_dir)).stdout)
    deleted = [r for r in everything if r["outcome"] == "deleted"]
    assert len(deleted) == summary["deletedLedgers"] + summary["deletedOffloadedCopies"]
    last3 = run_cli("audit", "--json", "--limit", "3", "--newest-first", "--data-dir", str(data_dir))
    assert [r["seq"] for r in json.loads(last3.stdout)] == [r["seq"] for r in everything[-3:]][::-1]
    parked = run_cli("audit", "--json", "--outcome", "dlq", "--outcome", "still-in-use", "--data-dir", str(data_dir))
    assert {r["outcome"] for r in json.loads(parked.stdout)} == {"dlq", "still_in_use"}
    assert len(json.loads(parked.stdout)) == summary["deadLettered"] + summary["stillInUse"]
    run_cli("audit", "--outcome", "delted", "--data-dir", str(data_dir)).assert_one_line_error(
        2, "unknown --outcome delted", "known: deleted")


def test_verify_counts_the_records_before_the_break(tmp_path: Path, after_demo: tuple) -> None:
    data_dir, _ = after_demo
    copy = tmp_path / "copy"
    (copy / "audit").mkdir(parents=True)
    for f in (data_dir / "audit").iterdir():
        (copy / "audit" / f.name).write_bytes(f.read_bytes())
    trail = copy / "audit" / "audit-1.jsonl"
    lines = trail.read_bytes().split(b"\n")
    assert b'"seq":2,' in lines[1]
    lines[1] = lines[1].replace(b'"reason":"', b'"reason":"edited ', 1)  # seq 2 edited: found at seq 3
    trail.write_bytes(b"\n".join(lines))
    r = run_cli("audit", "verify", "--files-only", "--data-dir", str(copy))
    line = r.assert_one_line_error(1, "broken at record seq 2")
    assert "1 record(s) before it are whole" in line, line  # seq 1 only; it said 2


@pytest.mark.slow
def test_held_requests_say_why_and_until_when_and_the_figures_agree(after_demo: tuple, tmp_path: Path) -> None:
    """``status``, ``/metrics`` and the summary line name why the demo's young requests wait and until
    when; the DLQ gauge says what ``dlq list`` says, before and after a requeue."""
    data_dir, _ = after_demo
    port = free_port()
    proc = start_daemon(data_dir, "--summary-every", "1", port=port)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: answers(f"{base}/healthz"), 60, "the daemon", proc=proc)
        metrics: list[str] = []

        def read() -> bool:
            metrics.append(_get(f"{base}/metrics"))
            return metric(metrics[-1], "pulsar_ledger_deletion_dlq_size") is not None

        wait_until(read, 60, "the DLQ gauge", proc=proc, interval=0.5)
        held = json.loads(_get(f"{base}/status"))["inHand"]
        groups = held["heldBy"]
        assert [(g["reason"], g["count"]) for g in groups] == [("not-yet", 3)], groups
        assert "minLedgerAgeSeconds" in groups[0]["example"]
        text = metrics[-1]
        assert metric(text, 'pulsar_ledger_deletion_held{reason="not-yet"}') == 3
        assert metric(text, 'pulsar_ledger_deletion_held{reason="retry-delay"}') == 0
        assert metric(text, "process_cpu_seconds_total") is not None
        # waiting, not stuck: nothing ready in the request partitions, nothing overdue; promtool over
        # this very scrape, held for 6 h 40 min: only the DLQ's 2 parked requests alert
        assert metric(text, "pulsar_ledger_deletion_request_backlog") == 0
        assert metric(text, "pulsar_ledger_deletion_held_overdue") == 0
        if PROMTOOL is not None:
            assert promtool_firing(text, tmp_path) == {"LedgerDeletionDLQNotEmpty"}
        assert re.search(r'^pulsar_ledger_deletion_build_info\{.*version="', text, flags=re.M)
        listed = json.loads(run_cli("dlq", "list", "--json", "--data-dir", str(data_dir)).stdout)
        assert metric(text, "pulsar_ledger_deletion_dlq_size") == len(listed) == 2
        status = run_cli("status", "--admin-address", f"127.0.0.1:{port}", env={"COLUMNS": "200"})
        assert re.search(r"3 \S* not yet: too young", status.stdout) or "not yet: too young" in status.stdout
        tomorrow = local_moment(time.time() + 86_000)[:10]
        assert tomorrow in status.stdout, status.stdout
        # dlq requeue of one of two: the gauge follows `dlq list` (it stayed at 3: the broker's backlog
        # counted the requeued message and the settlement marker, both acked)
        requeued = run_cli("dlq", "requeue", "--reason", "max-retries-reached", "--data-dir", str(data_dir))
        assert requeued.returncode == 0, requeued.stderr
        listed = json.loads(run_cli("dlq", "list", "--json", "--data-dir", str(data_dir)).stdout)
        assert len(listed) == 1
        wait_until(lambda: metric(_get(f"{base}/metrics"), "pulsar_ledger_deletion_dlq_size") == 1, 60,
                   "the DLQ gauge to follow the requeue", proc=proc, interval=0.5)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    summary = [line for line in err.splitlines() if "deletion_service.daemon.summary" in line]
    assert summary and re.search(r"3 not yet due \(not-yet 3 until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\)", summary[0]), \
        summary[:1]  # before the requeue (the requeued request, its ledger still open, waits too: 4)


def test_inflight_for_a_namespace_that_exists_nowhere_says_so(after_demo: tuple) -> None:
    data_dir, _ = after_demo
    run_cli("inflight", "--namespace", "nope/nope", "--data-dir", str(data_dir)).assert_one_line_error(
        1, "namespace nope/nope exists nowhere")
    known = data_dir / "broker" / "subscriptions.json"  # written once anything has subscribed on this data dir
    assert not known.exists() or "nope" not in known.read_text()  # nothing subscribed there


def test_a_purge_nobody_can_confirm_names_yes_and_drops_nothing(after_demo: tuple) -> None:
    data_dir, _ = after_demo
    before = json.loads(run_cli("dlq", "list", "--json", "--data-dir", str(data_dir)).stdout)
    assert before  # the demo parks requests
    run_cli("dlq", "purge", "--all", "--data-dir", str(data_dir), input="").assert_one_line_error(
        2, "no terminal answers", "--yes")
    assert len(json.loads(run_cli("dlq", "list", "--json", "--data-dir", str(data_dir)).stdout)) == len(before)


def test_reading_an_audit_topic_copy_that_is_off_says_so(after_demo: tuple) -> None:
    data_dir, _ = after_demo
    run_cli("audit", "--from-topic", "--data-dir", str(data_dir)).assert_one_line_error(
        1, "ledgerDeletionAuditTopicEnabled is false")
