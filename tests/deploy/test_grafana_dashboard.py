"""deploy/grafana's dashboard: the panels the issue asks for, every query valid PromQL (promtool
parses it) over metrics the daemon exports. test_prometheus_scrapes_the_daemon runs the same queries
against a real Prometheus scraping the daemon."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from deletion_service.metrics import DeletionMetrics
from deletion_service.orphans.push import scan_registry
from deletion_service.orphans.summary import ScanSummary
from tests.support.grafana_dashboard import DASHBOARD, dashboard_queries
from tests.support.harness import debian_tool

PROMTOOL = debian_tool("promtool")


def test_the_panels_the_issue_asks_for() -> None:
    d = json.loads(DASHBOARD.read_text())
    assert d["uid"] == "ledger-deletion" and {v["name"] for v in d["templating"]["list"]} == {
        "datasource", "job", "instance"}
    queries = dashboard_queries()
    assert {"Deletions/s by outcome", "In flight and DLQ size", "Retry rate", "Verification mismatches",
            "p99 send to delete"} <= set(queries)
    assert "histogram_quantile(0.99" in queries["p99 send to delete"][0]
    assert 'outcome="metadata_mismatch"' in queries["Verification mismatches"][0]
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))


def test_every_query_names_exported_metrics() -> None:
    m = DeletionMetrics()
    for labelled in (m.deleted, m.failed, m.sent):
        labelled.labels(type="LEDGER")
    m.dlq_size.set(0)  # the backlog gauges have a sample once the daemon's first reading is in
    m.estimated_inflight.set(0)
    m.unread_requests.set(0)
    m.cursors.set([], 1024)  # the cursor-health counts have a sample once the daemon read the cursors
    m.leak_watcher.leaks_observed.labels(kind="ledger", tenant="t", namespace="ns")  # once a leak was seen
    scan = scan_registry(ScanSummary(1, 2, 3, 4, 5, 6, 7, 8, 9, 10_000))  # the scan's pushed gauges
    exported = {line.split("{")[0].split(" ")[0] for registry in (m.registry, scan)
                for line in generate_latest(registry).decode().splitlines() if line and not line.startswith("#")}
    used = {n for qs in dashboard_queries().values() for q in qs for n in re.findall(r"\b(pulsar_\w+)", q)}
    assert len(used) >= 7 and used <= exported, used - exported


@pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: scripts/test.sh installs Debian prometheus")
def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    def check(exprs: list[str]) -> subprocess.CompletedProcess:
        rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"q{i}", "expr": e}
                                                              for i, e in enumerate(exprs)]}]}
        (tmp_path / "q.yml").write_text(json.dumps(rules))
        return subprocess.run([PROMTOOL, "check", "rules", str(tmp_path / "q.yml")],  # type: ignore[list-item]
                              capture_output=True, text=True)

    exprs = [q for qs in dashboard_queries().values() for q in qs]
    r = check(exprs)
    assert r.returncode == 0 and f"SUCCESS: {len(exprs)} rules found" in r.stdout, r.stdout + r.stderr
    assert check(["sum by (outcome (rate(x[1m]))"]).returncode != 0
