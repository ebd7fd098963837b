"""Everyday CLI habits through the real command line: help that 80 columns never cuts, the
common options in every subcommand's help, --version, Ctrl-C without a traceback, and
read-only commands that never create what they were pointed at."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest

from deletion_service.embedded.broker import EmbeddedBroker, port_answers
from tests.support.cli_runner import run_cli
from tests.support.harness import communicate_or_show_stacks, free_port, wait_until

ENV_NAMES = ("LEDGER_DELETION_METADATA_STORE", "LEDGER_DELETION_BOOKKEEPER_METADATA_STORE",
             "LEDGER_DELETION_BROKER_URL", "LEDGER_DELETION_WEB_SERVICE_URL", "LEDGER_DELETION_DATA_DIR")
URL_FORMS = ("zk://host:port[,host:port][/chroot]", "sqlite:///path/metadata.db", "pulsar://host:6650")
COMMON = ("--metadata-store", "--bookkeeper-metadata-store", "--broker-url", "--web-service-url", "--data-dir",
          "--config", "--set", "--json", "--debug")


def _words(text: str) -> set[str]:
    """Every whitespace-separated word of a help screen, box-drawing and punctuation trimmed."""
    return {w.strip("│╭╮╰╯─,.;()") for w in text.split()}


def _cut(text: str) -> list[str]:
    """Lines where rich cut a word: an ellipsis at the end of a table cell."""
    return [line for line in text.splitlines() if re.search(r"…\s*(│|$)", line)]


def test_root_help_at_80_columns_never_cuts_an_env_var_or_url_form() -> None:
    r = run_cli("--help", env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    words = _words(r.stdout)
    for whole in ENV_NAMES + URL_FORMS:
        assert whole in words, whole
    assert not _cut(r.stdout)


@pytest.mark.parametrize("argv", [["dlq", "list"], ["inspect", "managed-ledger"], ["cursor", "reset"], ["inflight"],
                                  ["config", "show"], ["enqueue"], ["scan-orphans"]])
def test_subcommand_help_lists_the_common_options(argv: list[str]) -> None:
    r = run_cli(*argv, "--help", env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    assert "Common options" in r.stdout
    for option in COMMON:
        assert re.search(rf"{re.escape(option)}\b", r.stdout), option
    assert not _cut(r.stdout)


def test_version() -> None:
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"ledger-deletion {metadata.version('ledger-deletion')}"


@pytest.mark.parametrize("delay", [0.3, 0.8, 2.0])
def test_ctrl_c_during_start_up_is_one_line_and_130(delay: float) -> None:
    """Sent while importing or while waiting for a ZooKeeper nobody serves (a 5 s connect)."""
    proc = subprocess.Popen([sys.executable, "-m", "deletion_service.cli.main", "inspect", "cursor", "--path", "/x",
                             "--metadata-store", f"zk://127.0.0.1:{free_port()}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert proc.returncode == 130, (proc.returncode, err)
    assert err.strip().splitlines()[-1].endswith("interrupted")


def test_ctrl_c_in_demo_says_what_was_left_where(tmp_path: Path) -> None:
    data_dir = tmp_path / "demo-data"
    proc = subprocess.Popen([sys.executable, "-m", "deletion_service.cli.main", "demo", "--data-dir", str(data_dir)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    broker = EmbeddedBroker(data_dir)
    # once its broker answers, the demo owns it (Ctrl-C while the broker starts)
    wait_until(lambda: (info := broker.read_info()) is not None and port_answers(info.port), 60, "the demo's broker",
               proc)
    proc.send_signal(signal.SIGINT)
    _, err = communicate_or_show_stacks(proc, 60)
    assert proc.returncode == 130, err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith((" ", "⠋"))]
    assert "Traceback" not in err
    assert "interrupted while" in lines[-1] and str(data_dir) in lines[-1] and "run --exit-when-idle" in lines[-1]
    assert not (data_dir / "broker" / "broker.json").exists()  # the broker was stopped


@pytest.mark.parametrize("argv", [
    ["inspect", "managed-ledger", "--path", "/managed-ledgers/t/ns/persistent/x"],
    ["cursor", "health"],
    ["dlq", "list"],
    ["inflight"],
])
def test_read_only_commands_never_create_a_missing_data_dir(argv: list[str], tmp_path: Path) -> None:
    never = tmp_path / "never"
    run_cli(*argv, "--data-dir", str(never)).assert_one_line_error(1, str(never))
    assert not never.exists()


def test_read_only_commands_never_create_a_missing_sqlite_store(tmp_path: Path) -> None:
    db = tmp_path / "no" / "such.db"
    run_cli("--metadata-store", f"sqlite://{db}", "inspect", "managed-ledger", "--path", "/x").assert_one_line_error(
        1, f"no SQLite metadata store at {db}")
    run_cli("cursor", "health", "--metadata-store", f"sqlite://{db}").assert_one_line_error(1, str(db))
    assert not db.parent.exists()


def test_data_dir_from_the_environment(tmp_path: Path) -> None:
    never = tmp_path / "from-env"
    env = {"LEDGER_DELETION_DATA_DIR": str(never)}
    shown = json.loads(run_cli("config", "show", "--json", env=env).stdout)
    assert shown["dataDir"]["value"] == str(never)
    run_cli("inspect", "cursor", "--path", "/x", env=env).assert_one_line_error(1, str(never))
    assert not never.exists()


@pytest.mark.parametrize("argv,fragment", [
    (["dlq", "list", "--limit", "-1"], "--limit"),
    (["inspect", "bk-path", "-5"], "ledger"),
    (["cursor", "reset", "-t", "persistent://t/ns/x", "-s", "s", "--position", "soon"], "--position"),
])
def test_usage_errors_exit_2(argv: list[str], fragment: str) -> None:
    r = run_cli(*argv)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert fragment in r.stderr and "Traceback" not in r.stderr


def test_errors_are_in_our_words_and_said_once(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("minLedgerAgeSeconds = 'a day'\n")
    line = run_cli("config", "show", "--config", str(cfg)).assert_one_line_error(1, "minLedgerAgeSeconds", str(cfg))
    assert "pydantic" not in line and "type=" not in line and "errors.pydantic.dev" not in line
    assert "Input should be" not in line  # pydantic's phrasing
    assert line.count("minLedgerAgeSeconds") == 1


def test_a_snake_case_key_in_toml_is_an_unknown_key(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("min_ledger_age_seconds = 5\n")
    run_cli("config", "show", "--config", str(cfg)).assert_one_line_error(
        1, "unknown config key 'min_ledger_age_seconds'", "minLedgerAgeSeconds")


def test_config_show_never_cuts_a_key_and_json_keeps_the_source(tmp_path: Path) -> None:
    env = {"COLUMNS": "80", "LEDGER_DELETION_MANAGED_LEDGER_MAX_ACK_STATE_IN_BYTES_TO_PERSIST": "4096"}
    people = run_cli("config", "show", env=env)
    assert people.returncode == 0, people.stderr
    words = _words(people.stdout)
    for key in ("managedLedgerMaxAckStateInBytesToPersist", "dispatcherPauseOnAckPersistentStateEnabled",
                "twoPhaseDeletionLedgerDeletionParallelism", "managedLedgerOffloadServiceEndpoint"):
        assert key in words, key
    shown = json.loads(run_cli("config", "show", "--json", env=env).stdout)
    assert shown["managedLedgerMaxAckStateInBytesToPersist"] == {
        "value": 4096, "source": "env LEDGER_DELETION_MANAGED_LEDGER_MAX_ACK_STATE_IN_BYTES_TO_PERSIST"}
    assert shown["twoPhaseDeletionMaxRetryDeleteCount"] == {"value": 10, "source": "default"}
