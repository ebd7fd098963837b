"""What a newcomer types after ``demo``, through the real CLI with its output piped (as ``| cat``, a
log or a script reads it): tables come out as plain columns with every value whole, ``status``
finds the daemon of its data dir on whatever port it listens (and says so of a killed one),
``config show`` prints the value in effect for every key, every moment in ``--json`` is RFC 3339
UTC, a typed topic that exists nowhere is refused or named with the closest one, every ``--help``
has examples and cuts nothing at 80 columns, and the daemon's loggers share the package's name.

One demo (a few seconds) and one daemon on its data dir feed the checks.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from deletion_service.embedded.broker import pids_serving, stop_pid
from tests.support.cli_runner import run_cli
from tests.support.daemon_process import answers, start_daemon
from tests.support.harness import free_port, wait_until

#: What a boxed rich table draws; plain columns draw none of it.
BOX = re.compile(r"[┏┓┗┛┃━┡┩╇┌┐└┘│─├┤┼╭╮╰╯]")

#: RFC 3339 in UTC, as the CLI's JSON gives every moment.
RFC3339_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")

#: Every command's path, for --help.
COMMANDS = ("", "run", "demo", "enqueue", "trim", "inflight", "dlq", "dlq list", "dlq requeue", "dlq purge",
            "config", "config show", "scan-orphans", "inspect", "inspect managed-ledger", "inspect cursor",
            "inspect bk-ledger", "inspect bk-path", "cursor", "cursor reset", "cursor health", "status", "audit",
            "audit verify")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, str]]:
    """The demo's data dir, its printed summary (piped) and its namespace."""
    data_dir = tmp_path_factory.mktemp("first-commands") / "data"
    r = run_cli("demo", "--data-dir", str(data_dir), timeout=180)
    assert r.returncode == 0, r.stderr
    namespace = re.search(r"namespace (demo/\S+)", r.stdout)
    assert namespace is not None, r.stdout
    try:
        yield data_dir, r.stdout, namespace.group(1)
    finally:
        for pid in pids_serving(data_dir.absolute() / "broker" / "db"):
            stop_pid(pid)


@pytest.fixture(scope="module")
def daemon(demo: tuple[Path, str, str]) -> Iterator[tuple[subprocess.Popen, int]]:
    """``run`` on the demo's data dir, its admin API on a free port (not 8090), logging JSON."""
    data_dir, _, _ = demo
    port = free_port()
    proc = start_daemon(data_dir, "--log-format", "json", port=port)
    try:
        wait_until(lambda: answers(f"http://127.0.0.1:{port}/healthz"), 90, "the daemon", proc=proc, interval=0.5)
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)


def test_the_demo_summary_piped_is_plain_columns(demo: tuple[Path, str, str]) -> None:
    _, printed, namespace = demo
    assert not BOX.search(printed), printed
    assert f"ledger-deletion demo — namespace {namespace}" in printed.splitlines()
    assert re.search(r"^deleted ledgers\s+\d+$", printed, flags=re.M), printed


def test_inflight_piped_is_plain_columns_with_whole_topics(demo: tuple[Path, str, str]) -> None:
    data_dir, _, _ = demo
    for args in (["--wide", "inflight"], ["inflight"]):
        r = run_cli(*args, "--data-dir", str(data_dir))
        assert r.returncode == 0, r.stderr
        assert not BOX.search(r.stdout), r.stdout
        assert re.search(r"^persistent://pulsar/system/__ledger_deletion-RETRY\s+\d+$", r.stdout, flags=re.M), r.stdout


def test_status_finds_the_daemon_of_its_data_dir_on_any_port_and_prints_whole_values(
        demo: tuple[Path, str, str], daemon: tuple[subprocess.Popen, int]) -> None:
    data_dir, _, _ = demo
    proc, port = daemon

    def held() -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5) as answer:
            return bool(json.loads(answer.read())["inHand"].get("heldBy"))

    wait_until(held, 90, "the demo's young requests held", proc=proc, interval=0.5)
    r = run_cli("status", "--data-dir", str(data_dir), env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    assert f"ledger-deletion at 127.0.0.1:{port}" in r.stdout.splitlines()
    assert not BOX.search(r.stdout), r.stdout
    assert "…" not in r.stdout, r.stdout
    assert "ledger younger than minLedgerAgeSeconds (86400s)" in r.stdout, r.stdout  # whole, never cut
    as_json = run_cli("status", "--json", "--data-dir", str(data_dir))
    assert as_json.returncode == 0, as_json.stderr
    assert RFC3339_UTC.fullmatch(json.loads(as_json.stdout)["inHand"]["heldUntil"])


def test_a_killed_daemons_record_is_ignored_and_said_so(tmp_path: Path, demo: tuple[Path, str, str]) -> None:
    data_dir, _, _ = demo
    copy = tmp_path / "copy"
    copy.mkdir()
    dead = subprocess.Popen(["sleep", "0"])
    dead.wait()  # a pid that ran and is gone
    free = free_port()
    (copy / "daemon.json").write_text(json.dumps({"pid": dead.pid, "adminAddress": f"127.0.0.1:{free}",
                                                  "adminUrl": f"http://127.0.0.1:{free}"}))
    line = run_cli("status", "--data-dir", str(copy), "--admin-address", "127.0.0.1:1").assert_one_line_error(
        1, "127.0.0.1:1")  # --admin-address wins over any record
    assert "daemon.json" not in line
    line = run_cli("status", "--data-dir", str(copy)).assert_one_line_error(1, f"names pid {dead.pid}",
                                                                           "no longer runs", "ignored")
    assert f"127.0.0.1:{free}/status" not in line  # the dead daemon's port is never asked


def test_config_show_prints_the_value_in_effect_for_every_key(demo: tuple[Path, str, str]) -> None:
    data_dir, _, _ = demo
    url = "zk://127.0.0.1:2181/pulsar"
    shown = json.loads(run_cli("config", "show", "--json", "--metadata-store", url, "--data-dir",
                               str(data_dir)).stdout)
    assert shown["bookkeeperMetadataStore"] == {"value": url, "source": "default (metadataStore)"}
    embedded = json.loads(run_cli("config", "show", "--json", "--data-dir", str(data_dir)).stdout)
    db = f"sqlite:///{data_dir.absolute() / 'metadata.db'}"
    assert embedded["metadataStore"]["value"] == embedded["bookkeeperMetadataStore"]["value"] == db
    assert embedded["offloadFileSystemBaseDir"]["value"] == str(data_dir.absolute() / "offload")
    assert "(embedded)" not in json.dumps(shown) + json.dumps(embedded)
    table = run_cli("config", "show", "--metadata-store", url, "--data-dir", str(data_dir)).stdout
    assert re.search(rf'^bookkeeperMetadataStore\s+"{re.escape(url)}"\s+default \(metadataStore\)$', table,
                     flags=re.M), table


def test_every_moment_in_json_is_rfc3339_utc(tmp_path: Path, demo: tuple[Path, str, str]) -> None:
    data_dir, _, _ = demo
    parked = json.loads(run_cli("dlq", "list", "--json", "--data-dir", str(data_dir)).stdout)
    assert parked and all(RFC3339_UTC.fullmatch(p["publishedAt"]) for p in parked), parked
    r = run_cli("demo", "--json", "--data-dir", str(tmp_path / "d"), timeout=180)
    try:
        assert r.returncode == 0, r.stderr
        assert RFC3339_UTC.fullmatch(json.loads(r.stdout)["waitingUntil"]), r.stdout
    finally:
        for pid in pids_serving((tmp_path / "d").absolute() / "broker" / "db"):
            stop_pid(pid)


def test_a_topic_that_exists_nowhere_is_named_with_the_closest_and_not_sent(demo: tuple[Path, str, str]) -> None:
    data_dir, _, namespace = demo
    d = ["--data-dir", str(data_dir)]
    typo = f"persistent://{namespace}/ordrs-1"
    run_cli("trim", "--dry-run", "-t", typo, *d).assert_one_line_error(
        1, f"did you mean persistent://{namespace}/orders-1?")
    run_cli("enqueue", "-t", typo, "--ledger-id", "3", *d).assert_one_line_error(
        1, f"did you mean persistent://{namespace}/orders-1?", "nothing was sent", "--allow-missing-topic")
    run_cli("enqueue", "-t", "bad", "--ledger-id", "3", *d).assert_one_line_error(
        1, "persistent://public/default/bad", "nothing was sent")
    sent = run_cli("enqueue", "-t", "bad", "--ledger-id", "3", "--allow-missing-topic", "--dry-run", "--json", *d)
    assert sent.returncode == 0 and json.loads(sent.stdout)["wouldSend"] == 1, sent.stderr
    line = run_cli("audit", "-t", "persistent://demo/nope", *d).assert_one_line_error(2, "persistent://demo/nope")
    assert line.count("expected") == 1, line


def test_every_help_has_examples_and_cuts_nothing_at_80_columns() -> None:
    for path in COMMANDS:
        r = run_cli(*path.split(), "--help", env={"COLUMNS": "80"})
        assert r.returncode == 0, (path, r.stderr)
        assert "Examples" in r.stdout and "ledger-deletion " + path in r.stdout, (path, r.stdout)
        cut = [line for line in r.stdout.splitlines() if re.search(r"\S…", line) and "…)" not in line]
        assert cut == [], (path, cut)


def test_the_daemons_loggers_share_the_packages_name(daemon: tuple[subprocess.Popen, int]) -> None:
    proc, port = daemon
    wait_until(lambda: answers(f"http://127.0.0.1:{port}/status"), 30, "the admin API", proc=proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    loggers = {json.loads(line)["logger"] for line in err.splitlines() if line.startswith("{")}
    assert "deletion_service.run" in loggers, loggers  # "running against …", "stopped"
    assert [name for name in loggers if not name.startswith("deletion_service.")] == [], loggers
