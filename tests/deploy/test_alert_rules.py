"""The Prometheus alert rules: valid, unit-tested by promtool, and naming metrics the daemon exports."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from deletion_service.cursor.health import CursorHealth, Status
from deletion_service.metrics import DeletionMetrics
from deletion_service.orphans.push import scan_registry
from deletion_service.orphans.summary import ScanSummary
from tests.support.harness import debian_tool

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
PROMTOOL = debian_tool("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: scripts/test.sh installs Debian prometheus")


def test_rules_are_valid() -> None:
    r = subprocess.run([PROMTOOL, "check", "rules", "ledger-deletion-alerts.yml"], cwd=RULES,  # type: ignore[list-item]
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS: 12 rules found" in r.stdout


def test_rules_fire_when_they_should_and_only_then() -> None:
    r = subprocess.run([PROMTOOL, "test", "rules", "ledger-deletion-alerts.test.yml"], cwd=RULES,  # type: ignore[list-item]
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def _exported(registry: CollectorRegistry) -> set[str]:
    return {line.split("{")[0].split(" ")[0] for line in generate_latest(registry).decode().splitlines()
            if line and not line.startswith("#")}


def test_every_metric_in_the_rules_is_exported() -> None:
    m = DeletionMetrics()
    m.acked.labels(outcome="dlq").inc()  # labelled families appear once used
    m.deleted.labels(type="LEDGER").inc()
    m.sent.labels(type="LEDGER").inc()
    m.failed.labels(type="LEDGER").inc()
    m.leak_watcher.leaks_observed.labels(kind="ledger", tenant="t", namespace="ns").inc()  # once a leak was seen
    m.dlq_size.set(0)  # the backlog gauges have a sample once the daemon's first reading is in
    m.estimated_inflight.set(0)
    m.unread_requests.set(0)
    m.undelivered.judged({}, {})
    near = CursorHealth("persistent://t/ns/a", "s", "/managed-ledgers/t/ns/persistent/a/s", 900, 900, 1000, 9, 0,
                        None, Status.NEAR)
    m.cursors.set([near], 1000)  # the cursor gauges have samples once the daemon read the cursors
    scan = ScanSummary(1, 2, 3, 4, 5, 6, 7, 8, 9, 10_000)
    exported = _exported(m.registry) | _exported(scan_registry(scan))
    used = set(re.findall(r"\b(pulsar_ledger_deletion_\w+)", (RULES / "ledger-deletion-alerts.yml").read_text()))
    assert used and used <= exported, used - exported


def test_no_rule_needs_a_series_the_daemon_cannot_export() -> None:
    """The cursor core's ``pulsar_cursor_*`` gauges are set only by ``cursor reset``, a short process no
    Prometheus scrapes: a rule on them could never fire from the daemon's scrape."""
    assert re.findall(r"\b(pulsar_cursor_\w+)", _expressions()) == []


def _expressions() -> str:
    doc = yaml.safe_load((RULES / "ledger-deletion-alerts.yml").read_text())
    return "\n".join(r["expr"] for g in doc["groups"] for r in g["rules"])
