"""Every shipped alert can fire and stays quiet in a healthy cluster, judged by
promtool over the shipped rules; and over a real daemon's ``/metrics`` scrape (see
``test_after_the_demo``: the demo's waiting state must not look stuck).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support.alert_rules import PROMTOOL, RULES, promtool_firing, rule_names

pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: scripts/test.sh installs Debian prometheus")


def test_every_rule_has_a_case_where_it_fires_and_one_where_it_does_not() -> None:
    doc = yaml.safe_load((RULES / "ledger-deletion-alerts.test.yml").read_text())
    fires, quiet = set(), set()
    for case in doc["tests"]:
        for check in case.get("alert_rule_test", []):
            (fires if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert rule_names() - fires == set(), "rules never shown to fire"
    assert rule_names() - quiet == set(), "rules never shown to stay quiet"
    assert {"LedgerDeletionAbsent", "LedgerDeletionScanSilent"} <= rule_names()  # absence is alerted on


def test_promtool_judges_a_scrape_held_constant(tmp_path: Path) -> None:
    """``promtool_firing`` itself: a scrape with 5 ready requests and nothing settled is stuck; the same with
    those requests held instead is not; a DLQ of 2 goes on for 6 hours."""
    stuck = ("pulsar_ledger_deletion_request_backlog 5\npulsar_ledger_deletion_held_overdue 0\n"
             'pulsar_ledger_deletion_acked_total{outcome="deleted"} 7\n')
    assert promtool_firing(stuck, tmp_path) == {"LedgerDeletionStuck"}
    waiting = ("pulsar_ledger_deletion_request_backlog 0\npulsar_ledger_deletion_held_overdue 0\n"
               'pulsar_ledger_deletion_held{reason="not-yet"} 3\npulsar_ledger_deletion_estimated_inflight 5\n'
               'pulsar_ledger_deletion_acked_total{outcome="deleted"} 7\npulsar_ledger_deletion_dlq_size 2\n')
    assert promtool_firing(waiting, tmp_path) == {"LedgerDeletionDLQNotEmpty"}
