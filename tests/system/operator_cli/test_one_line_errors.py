"""Operator mistakes get one clear line and the contract's exit code, never a traceback."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli_runner import run_cli
from tests.support.harness import free_port


@pytest.mark.parametrize("url,fragment", [
    ("foo://x", "unknown metadata store scheme 'foo'"),
    ("localhost", "has no scheme"),
    ("oxia://oxia:6648/broker", "names Oxia, which this tool does not support yet"),
    ("zk://host-without-port", "invalid host:port"),
    ("zk://user:pw@127.0.0.1:2181", "credentials in the ZooKeeper URL are not accepted"),
    ("sqlite://relative.db", "needs an absolute path"),
])
def test_malformed_store_url(url: str, fragment: str) -> None:
    line = run_cli("inspect", "cursor", "--path", "/x", "--metadata-store", url).assert_one_line_error(2, fragment)
    assert "pw" not in line  # the secret is not echoed back


def test_unreachable_zookeeper() -> None:
    port = free_port()
    run_cli("inspect", "cursor", "--path", "/x", "--metadata-store", f"zk://127.0.0.1:{port}").assert_one_line_error(
        1, f"cannot connect to ZooKeeper at 127.0.0.1:{port}", "check --metadata-store")


def test_missing_embedded_store(tmp_path: Path) -> None:
    run_cli("inspect", "cursor", "--path", "/x", "--data-dir", str(tmp_path / "never")).assert_one_line_error(
        1, "no embedded metadata store")


@pytest.fixture
def unwritable_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory nobody may create entries in — root included (immutable attribute)."""
    d = tmp_path / "locked"
    d.mkdir()
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(d)], capture_output=True).returncode != 0:
            pytest.skip("running as root on a filesystem without chattr +i: cannot make a dir unwritable")
        yield d
        subprocess.run(["chattr", "-i", str(d)], check=True)
    else:
        d.chmod(0o555)
        yield d
        d.chmod(0o755)


def test_data_dir_without_permission(unwritable_dir: Path) -> None:
    run_cli("demo", "--data-dir", str(unwritable_dir / "data")).assert_one_line_error(
        1, "cannot create data dir", "permission denied", "--data-dir")


def test_unknown_subcommand_is_usage_error() -> None:
    r = run_cli("frobnicate")
    assert r.returncode == 2 and "No such command" in r.stderr and "Traceback" not in r.stderr


def test_a_mistyped_subcommand_names_the_closest() -> None:
    r = run_cli("statu")
    assert r.returncode == 2 and "Did you mean 'status'?" in r.stderr
    assert "Did you mean 'enqueue'?" in run_cli("--json", "enqeue").stderr


def test_scan_orphans_refuses_bad_input_before_starting_spark(tmp_path: Path) -> None:
    run_cli("scan-orphans", "--min-age", "yesterday").assert_one_line_error(2, "--min-age expects a duration")
    run_cli("scan-orphans", "--data-dir", str(tmp_path / "never")).assert_one_line_error(
        1, "no embedded metadata store")


def test_help_lists_the_contract() -> None:
    r = run_cli("--help")
    assert r.returncode == 0
    for cmd in ["run", "demo", "enqueue", "trim", "cursor", "inflight", "dlq", "inspect", "scan-orphans", "config"]:
        assert cmd in r.stdout
