"""The alert rules' truth table, every row judged over what real processes export.

One ``ledger-deletion run`` (embedded broker, a SQLite store in its data dir) goes through the
states an operator meets, in order: healthy; waiting (a request for a ledger too young, held);
a cursor near its ack-state budget; stuck (a request ready and the delete phase wedged); down
(the daemon killed: its scrape fails, which Prometheus records as ``up`` 0 and no other
series); absent (no target at all).  The scan's side is a real ``prometheus-pushgateway`` fed
by the scan's own push code: before any push (scan silent), a push of 0 missing ledgers, one
of 2.  For each row the scrapes, held constant for 50 hours as Prometheus would have
recorded them, go to ``promtool test rules`` with the shipped rules, which names the alerts
that fire.

The one fault injected, and why: the wedged delete phase is the real daemon with the
``delete.before-storage=sleep:600`` failpoint (a hung dependency the real stores cannot be
made to produce on demand).  It caught a bug: the backlog gauges were refreshed between two
batches by the delete-phase thread itself, so a wedged batch froze ``request_backlog`` at 0
and ``LedgerDeletionStuck`` could not fire.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from deletion_service.embedded.broker import EmbeddedBroker, stop_pid
from deletion_service.orphans.push import JOB, push_summary
from deletion_service.orphans.summary import ScanSummary
from metastore import open_store
from metastore.formats import ManagedCursorInfo, MessageRange, Position, cursor_path, encode_cursor
from metastore.interface import ANY
from tests.support.alert_rules import PROMTOOL, RULES, rule_names
from tests.support.cli_runner import run_cli
from tests.support.harness import ServerProcess, debian_tool, free_port, wait_until
from tests.support.metrics_scrape import metric

PUSHGATEWAY = debian_tool("prometheus-pushgateway")
pytestmark = pytest.mark.skipif(PROMTOOL is None or PUSHGATEWAY is None,
                                reason="promtool/prometheus-pushgateway missing: scripts/test.sh installs Debian's")

TOPIC = "persistent://t/ns/orders"
YOUNG, OLD = 2, 3  # ledgers of TOPIC its managed ledger no longer lists: one made now, one two days ago
STEP_MIN, STEPS = 5, 600  # each row's scrapes held for 50 h: past ScanSilent's 2 days + 1 h
MINUTES = STEP_MIN * STEPS
BUDGET = 1024  # managedLedgerMaxAckStateInBytesToPersist: 60 acked ranges (~900 B) are near it


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read().decode()
    except OSError:
        return None  # as Prometheus records a failed scrape: up 0, no samples


def _series(scrape: str, keep: str, extra: dict[str, str], rebase: float | None = None) -> list[dict]:
    """promtool input series for every sample of ``scrape`` named ``keep``*, held for MINUTES; a
    Pushgateway's ``push_time_seconds`` moved to promtool's clock (it starts at 0), ``rebase`` s ago."""
    out = []
    for family in text_string_to_metric_families(scrape):
        for s in family.samples:
            if not s.name.startswith(keep) or s.name.endswith("_created"):
                continue
            labels = {**s.labels, **extra}
            text = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            values = f"{-rebase:g}+{STEP_MIN * 60}x{STEPS}" if rebase is not None else f"{s.value:g}x{STEPS}"
            out.append({"series": f"{s.name}{{{text}}}", "values": values})
    return out


@dataclass
class Row:
    """One row: the daemon's scrape (None: it failed; absent: no target) and the Pushgateway's."""

    name: str
    daemon: str | None
    gateway: str
    absent: bool = False
    fired: set[str] = field(default_factory=set)


def promtool_input(row: Row, tmp_path: Path) -> Path:
    """A ``promtool test rules`` file: this row's scrapes held for MINUTES, no alert expected of any rule."""
    series: list[dict] = []
    if not row.absent:
        up = 0 if row.daemon is None else 1
        series.append({"series": 'up{job="ledger-deletion", instance="d1:8090"}', "values": f"{up}x{STEPS}"})
    if row.daemon is not None:
        series += _series(row.daemon, "pulsar_ledger_deletion_", {"job": "ledger-deletion", "instance": "d1:8090"})
    pushed = re.search(rf'^push_time_seconds{{[^}}]*job="{JOB}"[^}}]*}} (\S+)$', row.gateway, flags=re.M)
    if pushed is not None:  # honor_labels: the pushed job is kept
        series += _series(row.gateway, "push_time_seconds", {}, rebase=time.time() - float(pushed.group(1)))
        series += _series(row.gateway, "pulsar_ledger_deletion_scan_", {})
    checks = [{"eval_time": f"{MINUTES}m", "alertname": n, "exp_alerts": []} for n in sorted(rule_names())]
    test = {"rule_files": [str(RULES / "ledger-deletion-alerts.yml")], "evaluation_interval": f"{STEP_MIN}m",
            "tests": [{"interval": f"{STEP_MIN}m", "input_series": series, "alert_rule_test": checks}]}
    path = tmp_path / f"{row.name.replace(' ', '-')}.test.yml"
    path.write_text(yaml.safe_dump(test))
    return path


def judge(rows: list[Row], tmp_path: Path) -> None:
    """Each row's alerts firing after MINUTES of its scrapes, as promtool says (one promtool per row, at once)."""
    runs = [subprocess.Popen([PROMTOOL, "test", "rules", str(promtool_input(row, tmp_path))],  # type: ignore[list-item]
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for row in rows]
    for row, run in zip(rows, runs, strict=True):
        out, _ = run.communicate(timeout=120)
        row.fired = set() if run.returncode == 0 else {n for n in rule_names() if f"alertname: {n}," in out}
        assert run.returncode == 0 or row.fired, out  # failed for another reason than an alert


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[str]:
    server = ServerProcess("pushgateway", tmp_path / "pushgateway", port=free_port())
    # memory only: Debian's default persists to /var/lib/prometheus/pushgateway.data, shared by every run
    server._spawn([PUSHGATEWAY, f"--web.listen-address=127.0.0.1:{server.port}",  # type: ignore[list-item]  # noqa: SLF001
                   "--persistence.file="])
    url = f"http://127.0.0.1:{server.port}"
    try:
        wait_until(lambda: _get(url + "/-/ready") is not None, 30, "pushgateway", server.proc, server.log_path)
        yield url
    finally:
        server.stop()


def _cluster(data_dir: Path) -> None:
    """A topic on ledger 1 with a cursor far from its budget; ledgers 2 (young) and 3 (old) left out."""
    data_dir.mkdir()
    with open_store(f"sqlite:///{data_dir / 'metadata.db'}") as store:
        writer = ClusterWriter(store)
        writer.ensure_layout()
        writer.bk_ledger(1, pulsar_custom_metadata(TOPIC))
        writer.bk_ledger(YOUNG, pulsar_custom_metadata(TOPIC))
        writer.bk_ledger(OLD, pulsar_custom_metadata(TOPIC), ctime_ms=int((time.time() - 2 * 86_400) * 1000))
        writer.managed_ledger(TOPIC, [1])
        writer.cursor(TOPIC, "billing", Position(1, 0))


def _ack_ranges(data_dir: Path, n: int) -> None:
    """The cursor's node as a broker would leave it with ``n`` individually acked ranges."""
    info = ManagedCursorInfo(-1, Position(1, 0), [MessageRange(Position(1, 2 * k), Position(1, 2 * k + 1))
                                                  for k in range(1, n + 1)])
    with open_store(f"sqlite:///{data_dir / 'metadata.db'}") as store:
        store.put(cursor_path(TOPIC, "billing"), encode_cursor(info), ANY)


def _start(data_dir: Path, admin: str, log: Path) -> subprocess.Popen:
    sets = [f"managedLedgerMaxAckStateInBytesToPersist={BUDGET}", "ledgerDeletionCursorHealthRefreshSeconds=1"]
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "deletion_service.cli.main", "run", "--data-dir", str(data_dir), "--admin-address",
             admin, *[a for s in sets for a in ("--set", s)]],
            stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "LEDGER_DELETION_FAILPOINTS": "delete.before-storage=sleep:600"})


def _scrape_when(url: str, proc: subprocess.Popen, log: Path, what: str, *patterns: tuple[str, float]) -> str:
    """The daemon's scrape once every ``(sample, value)`` reads so."""
    seen: list[str | None] = [None]

    def ready() -> bool:
        seen[0] = _get(url)
        return all(metric(seen[0] or "", p) == v for p, v in patterns)

    wait_until(ready, 60, what, proc=proc, log_path=log, interval=0.3)
    assert seen[0] is not None
    return seen[0]


def _enqueue(data_dir: Path, ledger_id: int) -> None:
    r = run_cli("enqueue", "--topic", TOPIC, "--ledger-id", str(ledger_id), "--data-dir", str(data_dir))
    assert r.returncode == 0, r.stderr


@pytest.mark.slow
def test_the_truth_table_from_real_scrapes(tmp_path: Path, gateway: str) -> None:
    data_dir, admin, log = tmp_path / "data", f"127.0.0.1:{free_port()}", tmp_path / "daemon.log"
    _cluster(data_dir)
    proc = _start(data_dir, admin, log)
    metrics, rows = f"http://{admin}/metrics", []
    no_scan = _get(gateway + "/metrics") or ""
    push_summary(gateway, ScanSummary(5, 0, 0, 4096, 0, 9, 3, 2, 86_400, 10_000))
    scan_ok = _get(gateway + "/metrics") or ""
    try:
        healthy = _scrape_when(metrics, proc, log, "the first readings", ("pulsar_ledger_deletion_request_backlog", 0),
                               ('pulsar_ledger_deletion_cursors{status="ok"}', 1))
        rows += [Row("healthy", healthy, scan_ok), Row("scan silent", healthy, no_scan)]

        _enqueue(data_dir, YOUNG)  # held a day: minLedgerAgeSeconds
        waiting = _scrape_when(metrics, proc, log, "the young request held",
                               ('pulsar_ledger_deletion_held{reason="not-yet"}', 1),
                               ("pulsar_ledger_deletion_request_backlog", 0))
        rows.append(Row("waiting", waiting, scan_ok))

        _ack_ranges(data_dir, 60)
        near = _scrape_when(metrics, proc, log, "the cursor near its budget",
                            ('pulsar_ledger_deletion_cursors{status="near"}', 1))
        rows.append(Row("cursor near budget", near, scan_ok))
        _ack_ranges(data_dir, 0)
        _scrape_when(metrics, proc, log, "the cursor back to health",
                     ('pulsar_ledger_deletion_cursors{status="ok"}', 1))

        _enqueue(data_dir, OLD)  # deletable: the delete phase takes it and wedges (the failpoint)
        wait_until(lambda: "failpoint delete.before-storage" in log.read_text(), 60, "the wedged batch", proc=proc,
                   log_path=log)
        stuck = _scrape_when(metrics, proc, log, "the ready request counted",
                             ("pulsar_ledger_deletion_request_backlog", 1))
        rows.append(Row("stuck", stuck, scan_ok))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        info = EmbeddedBroker(data_dir).read_info()  # the killed daemon's broker outlives it: stopped by its PID
        if info is not None:
            stop_pid(info.pid)
    rows.append(Row("down", _get(metrics), scan_ok))  # nothing answers: Prometheus records up 0
    push_summary(gateway, ScanSummary(5, 0, 2, 4096, 0, 9, 3, 2, 86_400, 10_000))
    missing = _get(gateway + "/metrics") or ""
    rows += [Row("absent", None, scan_ok, absent=True), Row("missing ledgers", healthy, missing)]

    judge(rows, tmp_path)
    table = "\n".join(f"  {r.name:<20} {', '.join(sorted(r.fired)) or '(none)'}" for r in rows)
    print(f"\nalerts firing after {MINUTES} min of each row's scrapes:\n{table}")
    assert {r.name: r.fired for r in rows} == {
        "healthy": set(),
        "scan silent": {"LedgerDeletionScanSilent"},
        "waiting": set(),
        "cursor near budget": {"LedgerDeletionCursorAckStateNearBudget"},
        "stuck": {"LedgerDeletionStuck"},
        "down": {"LedgerDeletionDown"},
        "absent": {"LedgerDeletionAbsent"},
        "missing ledgers": {"LedgerDeletionMissingLedgers"},
    }, table
    fired = set().union(*(r.fired for r in rows))
    assert fired >= rule_names() - {"LedgerDeletionDLQGrowing", "LedgerDeletionDLQNotEmpty",
                                     "LedgerDeletionMetadataMismatch",  # those: test_after_the_demo, e2e
                                     # a rising counter and 15 minutes of lag, which scrapes held constant
                                     # cannot show: promtool's own cases (deploy/prometheus), and the real
                                     # watcher's counter in tests/system/leak_watcher
                                     "LedgerDeletionBrokersLeaking", "LedgerDeletionLeakWatcherBehind",
                                     # a replica frozen holding requests, then killed: its own real-process
                                     # test, tests/system/alerts/test_stranded_requests_are_seen.py
                                     "LedgerDeletionRequestsUndelivered"}
