"""A ``ledger-deletion run`` process of the test's own: its data dir (a fixture that stops the embedded
broker a killed daemon left behind), starting it on an admin port, and whether a URL of it answers."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from deletion_service.embedded.broker import EmbeddedBroker, stop_pid
from tests.support.harness import free_port


@pytest.fixture
def data_dir(tmp_path: Path):  # noqa: ANN201
    d = tmp_path / "data"
    yield d
    info = EmbeddedBroker(d).read_info()  # a broker a killed daemon left behind is ours to stop
    if info is not None and EmbeddedBroker(d).is_ours_and_alive(info):
        stop_pid(info.pid)


def start_daemon(data_dir: Path, *extra: str, port: int | None = None) -> subprocess.Popen:
    """``ledger-deletion run`` on ``data_dir`` (admin API on ``port``, or a free one), its output piped."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "deletion_service.cli.main",
            "run",
            "--data-dir",
            str(data_dir),
            "--admin-address",
            f"127.0.0.1:{port or free_port()}",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def answers(url: str) -> bool:
    """Whether ``url`` answers within a second (any status)."""
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except OSError:
        return False
