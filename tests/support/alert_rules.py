"""The shipped Prometheus alert rules, judged by promtool: their names, and which of them fire over a
daemon whose every scrape is one given scrape."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support.harness import debian_tool

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
PROMTOOL = debian_tool("promtool")


def rule_names() -> set[str]:
    doc = yaml.safe_load((RULES / "ledger-deletion-alerts.yml").read_text())
    return {r["alert"] for g in doc["groups"] for r in g["rules"]}


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
    names = sorted(rule_names())
    checks = [{"eval_time": f"{minutes}m", "alertname": n, "exp_alerts": []} for n in names]
    test = {"rule_files": [str(RULES / "ledger-deletion-alerts.yml")], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": checks}]}
    (tmp_path / "scrape.test.yml").write_text(yaml.safe_dump(test))
    r = subprocess.run([PROMTOOL, "test", "rules", str(tmp_path / "scrape.test.yml")],  # type: ignore[list-item]
                       capture_output=True, text=True)
    if r.returncode == 0:
        return set()
    return {n for n in names if f"alertname: {n}," in r.stdout + r.stderr}
