"""``scan-orphans`` after ``demo``, through the real CLI with its output piped (a CronJob's log): a
progress line for every step to the last (summarising, drawing the report, stopping Spark), its
summary as plain columns, its report naming each section once, and its moment in RFC 3339 UTC."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from deletion_service.embedded.broker import pids_serving, stop_pid
from tests.support.cli_runner import run_cli

BOX = re.compile(r"[┏┓┗┛┃━┡┩╇┌┐└┘│─├┤┼╭╮╰╯]")


@pytest.mark.slow
def test_a_piped_scan_says_each_step_to_the_end_and_its_report_names_each_section_once(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    demo = run_cli("demo", "--data-dir", str(data_dir), timeout=180)
    for pid in pids_serving(data_dir.absolute() / "broker" / "db"):
        stop_pid(pid)
    assert demo.returncode == 0, demo.stderr
    out = tmp_path / "scan"
    r = run_cli("scan-orphans", "--min-age", "0s", "--output", str(out), "--data-dir", str(data_dir), timeout=280)
    assert r.returncode == 0, r.stderr
    steps = [line for line in r.stderr.splitlines() if line.startswith("scan-orphans [")]
    assert steps and steps[0].endswith("starting Spark"), steps
    assert steps[-1].endswith("stopping Spark"), steps
    said = "\n".join(steps)
    assert "summarising" in said and f"drawing {out / 'report.html'}" in said, steps
    assert not BOX.search(r.stdout), r.stdout
    assert re.search(r"^orphan ledgers\s+\d+ \(", r.stdout, flags=re.M), r.stdout
    assert "Dry run: nothing was sent. Add --enqueue to have the daemon verify and delete them." in \
        r.stdout.splitlines(), r.stdout  # whole, on one line
    html = (out / "report.html").read_text()
    assert html.count("Orphan ledgers by kind") == 1, re.findall(r".*Orphan ledgers by kind.*", html)
    summary = json.loads((out / "summary.json").read_text())
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", summary["scannedAt"]), summary
