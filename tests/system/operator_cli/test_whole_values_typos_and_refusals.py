"""an operator's first day, through the real CLI (and the real daemon and admin API):
tables print whole values (1), typos are caught instead of reported as success (4), a refused
broker fails at once in one sentence (8), dates for people, one JSON error under --json, and the
admin API's DLQ filter (10).

The stores are SQLite data dirs (no server needed); the DLQ tests park requests on the embedded
broker with the ``parked`` fixture of ``tests/support/parked_requests.py``.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import pty
import re
import signal
import socket
import struct
import subprocess
import sys
import termios
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from deletion_service.audit import trail
from deletion_service.audit.writer import AuditWriter
from deletion_service.cli.connections import probe_broker
from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from deletion_service.embedded.broker import EmbeddedBroker
from deletion_service.errors import UserError
from metastore import open_store
from metastore.formats import LedgerInfo, Position
from tests.support.audit_entries import entry as audit_entry
from tests.support.cli_runner import CliResult, run_cli
from tests.support.daemon_process import answers
from tests.support.harness import free_port, wait_until
from tests.support.parked_requests import PARKED, TOPIC, Parked, parked  # noqa: F401 - the fixture

TENANT = "acme-corporation"
TOPICS = [f"persistent://{TENANT}/orders-region-eu/orders-partition-{i}" for i in range(12)]
LEDGER_TIME_MS = 1_790_000_000_000  # 2026-09-21T14:13:20Z
ISO_UTC = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\b")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture
def world(tmp_path: Path) -> Path:
    """A data dir whose store has twelve long-named topics, each with ledger 7 and a cursor;
    ledger 7 also has BookKeeper metadata."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    with open_store(f"sqlite:///{data_dir / 'metadata.db'}") as store:
        writer = ClusterWriter(store)
        writer.ensure_layout()
        writer.bk_ledger(7, pulsar_custom_metadata(TOPICS[1]))
        for topic in TOPICS:
            writer.managed_ledger(topic, [LedgerInfo(7, entries=1000, size=4096, timestamp=LEDGER_TIME_MS)])
            writer.cursor(topic, "billing-subscription", Position(7, -1))
    return data_dir


def store_of(data_dir: Path) -> list[str]:
    return ["--metadata-store", f"sqlite:///{data_dir / 'metadata.db'}"]


def on_terminal(*args: str, columns: int = 80, timeout: float = 60) -> str:
    """Run the CLI with stdout on a pseudo-terminal ``columns`` wide; what it showed, colours removed."""
    master, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm-256color"}
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        env.pop(name, None)
    proc = subprocess.Popen([sys.executable, "-m", "deletion_service.cli.main", *args], stdout=child,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=env)
    os.close(child)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(timeout) == 0
    return ANSI.sub("", out.decode()).replace("\r\n", "\n")


# 1. Tables never shorten an id, topic or time.

def test_cursor_health_piped_lists_every_topic_whole_one_line_each(world: Path) -> None:
    r = run_cli(*store_of(world), "cursor", "health", "--all", env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    assert "…" not in r.stdout
    rows = [line for line in r.stdout.splitlines() if "orders-partition-" in line]
    assert sorted(line.split()[0] for line in rows) == sorted(TOPICS)  # like `grep -c orders-partition-` = 12
    assert all("billing-subscription" in line and line.split()[-1] == "ok" for line in rows)


def test_audit_piped_can_be_grepped_for_a_topic(tmp_path: Path) -> None:
    """``ledger-deletion audit | grep -c orders-0`` counted 0: the table cut every topic to ``persistent…``."""
    writer = AuditWriter(trail.audit_dir(tmp_path), 64 * 1024 * 1024)
    for ledger, topic in enumerate(TOPICS, start=1):
        assert writer.write(audit_entry(ledger, topic)) is not None
    long_reason = "dlq purge by ops@host: message 5:0 left the DLQ (parked for invalid-request: " + "x" * 150 + ") END"
    assert writer.write(dataclasses.replace(audit_entry(99), reason=long_reason)) is not None
    writer.close()
    r = run_cli("audit", "--data-dir", str(tmp_path), env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    assert "…" not in r.stdout
    assert sum(TOPICS[3] in line for line in r.stdout.splitlines()) == 1
    assert len([line for line in r.stdout.splitlines() if "orders-partition-" in line]) == len(TOPICS)
    assert sum(long_reason in line for line in r.stdout.splitlines()) == 1  # a reason is never cut either


def test_dlq_list_shows_whole_topics_and_times_piped_and_on_a_terminal(parked: Parked) -> None:  # noqa: F811
    piped = parked.cli("dlq", "list")
    assert piped.returncode == 0, piped.stderr
    lines = piped.stdout.splitlines()
    assert len(lines) == 2 + len(PARKED)  # title, header, one line per parked request (no wrapped rows)
    for message_id, line in zip(parked.ids.values(), lines[2:], strict=True):
        assert line.split()[0] == message_id and ISO_UTC.search(line), line
    assert sum(TOPIC in line for line in lines) == len(PARKED) - 1  # the undecodable one names no topic
    narrow = on_terminal("dlq", "list", "--data-dir", str(parked.data_dir), columns=80)
    assert "…" not in narrow and narrow.count(TOPIC) == len(PARKED) - 1, narrow
    assert len(ISO_UTC.findall(narrow)) == len(PARKED), narrow
    boxed = on_terminal("dlq", "list", "--data-dir", str(parked.data_dir), columns=200)
    assert "┃" in boxed and boxed.count(TOPIC) == len(PARKED) - 1  # fits: the boxed table, whole
    wide = on_terminal("dlq", "list", "--wide", "--data-dir", str(parked.data_dir), columns=200)
    assert "┃" not in wide and wide.count(TOPIC) == len(PARKED) - 1  # --wide: plain columns on a terminal too


# 4. Typos must not report success.

def test_dlq_reason_typo_is_refused_naming_the_known_reasons(world: Path) -> None:
    line = run_cli("dlq", "list", "--reason", "invalid-requst", "--data-dir", str(world)).assert_one_line_error(
        2, "invalid-requst", "did you mean invalid-request?")
    assert "delete-failed" in line and "max-retries-reached" in line  # the known ones, listed
    run_cli("dlq", "purge", "--reason", "delet-failed", "--yes", "--data-dir", str(world)).assert_one_line_error(
        2, "did you mean delete-failed?")


def test_cursor_health_for_a_tenant_or_namespace_that_exists_nowhere(world: Path) -> None:
    run_cli(*store_of(world), "cursor", "health", "--tenant", "nobody").assert_one_line_error(
        1, "tenant nobody exists nowhere")
    run_cli(*store_of(world), "cursor", "health", "--tenant", "acme-corporatio").assert_one_line_error(
        1, "did you mean acme-corporation?")
    run_cli(*store_of(world), "cursor", "health", "--namespace", f"{TENANT}/orders-region-e").assert_one_line_error(
        1, f"did you mean {TENANT}/orders-region-eu?")
    r = run_cli(*store_of(world), "cursor", "health", "--tenant", TENANT)
    assert r.returncode == 0 and "all 12 cursors" in r.stdout, r.stderr


def test_an_unknown_ledger_deletion_env_variable_is_an_error(tmp_path: Path) -> None:
    run_cli("config", "show", env={"LEDGER_DELETION_MIN_LEDGER_AGE_SECOND": "5"}).assert_one_line_error(
        1, "unknown environment variable LEDGER_DELETION_MIN_LEDGER_AGE_SECOND",
        "did you mean LEDGER_DELETION_MIN_LEDGER_AGE_SECONDS?")
    fine = {"LEDGER_DELETION_MIN_LEDGER_AGE_SECONDS": "5", "LEDGER_DELETION_DATA_DIR": str(tmp_path),
            "LEDGER_DELETION_ADMIN_TOKEN": "t"}
    r = run_cli("config", "show", "--json", env=fine)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["minLedgerAgeSeconds"]["value"] == 5


def test_enqueue_refuses_a_topic_that_exists_nowhere_warns_about_a_missing_ledger_and_dry_run_sends_nothing(
        world: Path, tmp_path: Path) -> None:
    typo = TOPICS[1].replace("orders-partition", "ordrs-partition")
    d = ["--data-dir", str(world)]
    run_cli("enqueue", "--topic", typo, "--ledger-id", "8", "--dry-run", *d).assert_one_line_error(
        1, f"did you mean {TOPICS[1]}?", "--allow-missing-topic")
    d.append("--allow-missing-topic")  # a deleted topic's leftover ledger: sent, with the doubts said
    r = run_cli("enqueue", "--topic", typo, "--ledger-id", "8", "--dry-run", "--json", *d)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["dryRun"] is True and out["wouldSend"] == 1 and out["requests"][0]["payload"]["ledgerId"] == 8
    assert out["requests"][0]["topic"] == "persistent://pulsar/system/__ledger_deletion-partition-0"  # 8 % 4
    doubts = " ".join(out["warnings"])
    assert f"did you mean {TOPICS[1]}?" in doubts and "ledger 8 has no BookKeeper metadata" in doubts
    assert EmbeddedBroker(world).read_info() is None  # a dry run starts nothing
    clean = run_cli("enqueue", "--topic", TOPICS[1], "--ledger-id", "7", "--dry-run", *d)
    assert clean.returncode == 0 and "would send 1" in clean.stdout and "warning" not in clean.stderr, clean.stderr
    fresh = tmp_path / "dta"
    r = run_cli("enqueue", "--topic", TOPICS[1], "--ledger-id", "7", "--dry-run", "--data-dir", str(fresh))
    assert "no embedded metadata store" in r.stderr and not fresh.exists()
    try:
        sent = run_cli("enqueue", "--topic", typo, "--ledger-id", "8", *d)
        assert sent.returncode == 0 and "sent 1" in sent.stdout, sent.stderr
        assert f"warning: topic {typo} has no managed ledger" in sent.stderr and "ledger 8 has no" in sent.stderr
        created = run_cli("enqueue", "--topic", TOPICS[1], "--ledger-id", "7", "--data-dir", str(fresh), "--json")
        assert created.returncode == 0 and json.loads(created.stdout)["sent"] == 1, created.stderr
        notes = [json.loads(line)["warning"] for line in created.stderr.splitlines() if line.strip()]
        assert any(f"created a new, empty data dir {fresh}" in note for note in notes), created.stderr
    finally:
        EmbeddedBroker(world).stop()
        EmbeddedBroker(fresh).stop()


# 8. A refused broker fails at once, in one sentence.

def test_a_refused_broker_fails_in_one_sentence_without_waiting_out_the_client(world: Path) -> None:
    url = f"pulsar://127.0.0.1:{free_port()}"
    line = run_cli("--broker-url", url, *store_of(world), "inflight").assert_one_line_error(
        1, f"cannot connect to the broker at {url}: connection refused")
    assert "TimeOut" not in line and "partitions" not in line


def test_the_probe_leaves_a_listening_broker_to_the_client_and_names_an_unknown_host() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listening:  # accepts connections, answers nothing
        probe_broker(f"pulsar://127.0.0.1:{listening.getsockname()[1]}")
        probe_broker(f"pulsar://127.0.0.1:{free_port()},127.0.0.1:{listening.getsockname()[1]}")
    with pytest.raises(UserError, match="unknown host no-such-host.invalid"):
        probe_broker("pulsar://no-such-host.invalid:6650")


# 10. Dates for people, one JSON error under --json, the admin API's DLQ filter.

def test_inspect_shows_utc_dates_and_json_keeps_the_raw_milliseconds(world: Path) -> None:
    people = run_cli(*store_of(world), "inspect", "managed-ledger", "--topic", TOPICS[0])
    assert people.returncode == 0, people.stderr
    assert "2026-09-21T14:13:20.000Z" in people.stdout and str(LEDGER_TIME_MS) not in people.stdout
    raw = json.loads(run_cli(*store_of(world), "inspect", "managed-ledger", "--topic", TOPICS[0], "--json").stdout)
    assert raw["ledgers"][0]["timestamp"] == LEDGER_TIME_MS


def _json_error(r: CliResult, code: int) -> str:
    assert r.returncode == code and r.stdout == "", (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    error = json.loads(lines[0])
    assert error["exitCode"] == code
    return error["error"]


def test_with_json_a_user_error_is_one_json_object_with_the_same_exit_code(world: Path) -> None:
    assert "did you mean invalid-request?" in _json_error(
        run_cli("dlq", "list", "--reason", "invalid-requst", "--json", "--data-dir", str(world)), 2)
    assert "--limit" in _json_error(run_cli("--json", "dlq", "list", "--limit", "-1"), 2)  # click's own
    assert "tenant nobody exists nowhere" in _json_error(
        run_cli(*store_of(world), "cursor", "health", "--tenant", "nobody", "--json"), 1)


def test_admin_dlq_listing_honours_reason_and_the_daemon_says_what_it_runs_against(
        parked: Parked) -> None:  # noqa: F811
    EmbeddedBroker(parked.data_dir).stop()  # the daemon owns its broker
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "deletion_service.cli.main", "run", "--data-dir",
                             str(parked.data_dir), "--admin-address", f"127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/admin/v2/ledger-deletion/dlq"
    try:
        wait_until(lambda: answers(f"http://127.0.0.1:{port}/healthz"), 60, "the admin API", proc)
        with urllib.request.urlopen(f"{url}?reason=delete-failed", timeout=30) as answer:
            listed = json.loads(answer.read())
        assert [e["reason"] for e in listed] == ["delete-failed", "delete-failed"]
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{url}?reason=invalid-requst", timeout=30)
        assert refused.value.code == 400
        assert "did you mean invalid-request?" in json.loads(refused.value.read())["reason"]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, log = proc.communicate(timeout=60)
    start = next(line for line in log.splitlines() if "running against" in line)
    assert f"metadata store sqlite:///{parked.data_dir / 'metadata.db'}" in start
    assert "the embedded broker" in start and f"data dir {parked.data_dir}" in start
    assert "created now" not in start  # an existing data dir


def test_the_daemon_says_when_its_data_dir_was_created_now(tmp_path: Path) -> None:
    fresh = tmp_path / "typo"
    r = run_cli("run", "--exit-when-idle", "--max-wait", "60", "--admin-address", f"127.0.0.1:{free_port()}",
                "--data-dir", str(fresh), timeout=120)
    assert r.returncode == 0, r.stderr
    start = next(line for line in r.stderr.splitlines() if "running against" in line)
    assert f"data dir {fresh} (created now, empty" in start
