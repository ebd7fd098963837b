"""The Grafana dashboard's queries by panel, with Grafana's variables as a plain Prometheus takes them."""

from __future__ import annotations

import json
from pathlib import Path

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "ledger-deletion-dashboard.json"


def dashboard_queries() -> dict[str, list[str]]:
    """Panel title → its queries, with Grafana's variables as a plain Prometheus would take them."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return {p["title"]: [t["expr"].replace("$__rate_interval", "1m").replace("$job", ".*").replace("$instance", ".*")
                         for t in p["targets"]] for p in panels}
