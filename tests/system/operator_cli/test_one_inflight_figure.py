"""Requests in flight: one figure, whoever asks — ``inflight`` with no daemon running, ``inflight`` beside a
running daemon, the daemon's admin route and its ``estimated_inflight`` gauge.

Real processes: the demo (embedded broker, SQLite store), then ``ledger-deletion run`` on its data dir.  The
demo leaves requests held for a day (their ledgers are too young) behind requests already settled on RETRY,
so the broker's backlog counts more than are held: the state in which the figures used to differ (the
command that started its own broker counted by receiving, the daemon read the broker's backlog).
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path

from tests.support.cli_runner import run_cli
from tests.support.daemon_process import data_dir, start_daemon

__all__ = ["data_dir"]  # the fixture: it stops a broker left behind
from tests.support.harness import free_port, wait_until
from tests.support.metrics_scrape import metric, scrape

ROUTE = "/admin/v2/broker-stats/estimated-inflight-deletion-ledger-count"


def _cli(where: Path) -> int:
    out = run_cli("inflight", "--json", "--data-dir", str(where))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["estimatedInflight"]


def _route(port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{ROUTE}", timeout=5) as r:
            return json.loads(r.read())
    except OSError:
        return None


def _gauge(port: int) -> float | None:
    try:
        return metric(scrape(port), "pulsar_ledger_deletion_estimated_inflight")
    except OSError:
        return None


def test_inflight_the_admin_route_and_the_gauge_give_one_figure_with_or_without_the_daemon(
        data_dir: Path) -> None:
    demo = run_cli("demo", "--data-dir", str(data_dir), timeout=180)
    assert demo.returncode == 0, demo.stderr
    alone = _cli(data_dir)
    assert alone > 0

    port = free_port()
    daemon = start_daemon(data_dir, port=port)
    try:
        wait_until(lambda: _gauge(port) is not None, 60, "the daemon's first in-flight reading", daemon)
        figures: dict[str, float | None] = {}

        def agree() -> bool:
            figures.update(route=_route(port), gauge=_gauge(port), cli=_cli(data_dir))
            return len({alone, *figures.values()}) == 1

        wait_until(agree, 60, f"the route, the gauge and inflight beside the daemon agreeing with {alone}")
    finally:
        daemon.terminate()
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait(10)
    assert _cli(data_dir) == alone, figures
