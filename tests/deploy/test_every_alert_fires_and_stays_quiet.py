"""Issue 31 point 3: every shipped alert can fire and stays quiet in a healthy cluster, judged by
promtool over the shipped rules; and over a real daemon's ``/metrics`` scrape (see
``test_after_the_demo``: the demo's waiting state must not look stuck).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support.harness import debian_tool

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
PROMTOOL = debian_tool("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: scripts/test.sh installs Debian prometheus")


def _rule_names() -> set[str]:
    doc = yaml.safe_load((RULES / "ledger-deletion-alerts.yml").read_text())
    return {r["alert"] for g in doc["groups"] for r in g["rules"]}


def test_every_rule_has_a_case_where_it_fires_and_one_where_it_does_not() -> None:
    doc = yaml.safe_load((RULES / "ledger-deletion-alerts.test.yml").read_text())
    fires, quiet = set(), set()
    for case in doc["tests"]:
        for check in case.get("alert_rule_test", []):
            (fires if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert _rule_names() - fires == set(), "rules never shown to fire"
    assert _rule_names() - quiet == set(), "rules never shown to stay quiet"
    assert {"LedgerDeletionAbsent", "LedgerDeletionScanSilent"} <= _rule_names()  # absence is alerted on


def promtool_firing(scrape: str, tmp_path: Path, instance: str = "d1:8090", minutes: int = 400,
                    scan_pushed: bool = True) -> set[str]:
    """The alerts of the shipped rules that fire after ``minutes`` of a daemon whose every scrape is
    ``scrape`` (its samples held constant), scraped as job ledger-deletion; promtool judges."""
    series = [{"series": f'up{{job="ledger-deletion", instance="{instance}"}}', "values": f"1x{minutes}"}]
    if scan_pushed:
        series.append({"series": 'push_time_seconds{job="ledger-deletion-scan-orphans"}',
                       "values": f"0+60x{minutes}"})
    for family in text_string_to_metric_families(scrape):
        for s in family.samples:
            if not s.name.startswith("pulsar_ledger_deletion_") or s.name.endswith("_created"):
                continue
            labels = {**s.labels, "job": "ledger-deletion", "instance": instance}
            text = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            series.append({"series": f"{s.name}{{{text}}}", "values": f"{s.value:g}x{minutes}"})
    names = sorted(_rule_names())
    checks = [{"eval_time": f"{minutes}m", "alertname": n, "exp_alerts": []} for n in names]
    test = {"rule_files": [str(RULES / "ledger-deletion-alerts.yml")], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": checks}]}
    (tmp_path / "scrape.test.yml").write_text(yaml.safe_dump(test))
    r = subprocess.run([PROMTOOL, "test", "rules", str(tmp_path / "scrape.test.yml")],  # type: ignore[list-item]
                       capture_output=True, text=True)
    if r.returncode == 0:
        return set()
    return {n for n in names if f"alertname: {n}," in r.stdout + r.stderr}


def test_promtool_judges_a_scrape_held_constant(tmp_path: Path) -> None:
    """The helper itself: a scrape with 5 ready requests and nothing settled is stuck; the same with
    those requests held instead is not; a DLQ of 2 goes on for 6 hours."""
    stuck = ("pulsar_ledger_deletion_request_backlog 5\npulsar_ledger_deletion_held_overdue 0\n"
             'pulsar_ledger_deletion_acked_total{outcome="deleted"} 7\n')
    assert promtool_firing(stuck, tmp_path) == {"LedgerDeletionStuck"}
    waiting = ("pulsar_ledger_deletion_request_backlog 0\npulsar_ledger_deletion_held_overdue 0\n"
               'pulsar_ledger_deletion_held{reason="not-yet"} 3\npulsar_ledger_deletion_estimated_inflight 5\n'
               'pulsar_ledger_deletion_acked_total{outcome="deleted"} 7\npulsar_ledger_deletion_dlq_size 2\n')
    assert promtool_firing(waiting, tmp_path) == {"LedgerDeletionDLQNotEmpty"}
