"""At the CLI: Ctrl-C during a real scan, Spark settings, reports kept.

The Ctrl-C test runs the real ``scan-orphans`` process (Spark in local mode, its own JVM) and
sends SIGINT to its process group as a terminal's Ctrl-C does, once the scan's progress says a
Spark step is under way.  The full scan on a cluster is tests/system/orphan_scan/test_standalone_spark_cluster.py.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

from deletion_service.orphans import reports_dir
from deletion_service.orphans.progress import Stage, bar, describe
from tests.support.cli_runner import run_cli
from tests.support.harness import wait_until
from tests.system.orphan_scan.test_scan_enqueue_drain import seed_references_dir


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def test_ctrl_c_during_a_scan_is_one_line_exit_130_and_spark_gone(tmp_path: Path) -> None:
    data_dir = tmp_path / "d"
    seed_references_dir(data_dir)
    proc = subprocess.Popen([sys.executable, "-m", "deletion_service.cli.main", "scan-orphans", "--spark-master",
                             "local[1]", "--data-dir", str(data_dir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr], daemon=True)  # type: ignore[union-attr]
    reader.start()
    seen: list[str] = []
    try:
        while not any("inventory:" in line for line in seen):  # Spark is up and running a step's job
            seen.append(lines.get(timeout=300))
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
        proc.wait(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    reader.join(timeout=10)
    while not lines.empty():
        seen.append(lines.get())
    said = [line.rstrip("\n") for line in seen if not line.startswith("scan-orphans [")]
    assert proc.returncode == 130, seen
    assert said == ["interrupted"], "".join(seen)
    wait_until(lambda: _group_gone(proc.pid), 60, "the scan's JVM and Python workers to exit")


def test_spark_settings_and_report_places_are_checked_before_spark_starts(tmp_path: Path) -> None:
    run_cli("scan-orphans", "--spark-conf", "spark.driver.memory", "--data-dir", str(tmp_path)).assert_one_line_error(
        2, "--spark-conf expects KEY=VALUE")
    run_cli("scan-orphans", "--output", str(tmp_path / "a"), "--reports-dir", str(tmp_path / "b"), "--data-dir",
            str(tmp_path)).assert_one_line_error(2, "--output and --reports-dir")
    run_cli("scan-orphans", "--reports-dir", str(tmp_path), "--keep-reports", "0", "--data-dir",
            str(tmp_path)).assert_one_line_error(2, "--keep-reports must be 1 or more")


def test_reports_dir_keeps_the_newest_and_points_latest_at_this_scan(tmp_path: Path) -> None:
    old = [tmp_path / f"scan-2020010{d}T000000Z" for d in (1, 2, 3)]
    for path in old:
        path.mkdir()
    (tmp_path / "notes.txt").write_text("an operator's file")
    this = reports_dir.run_dir(tmp_path, 1_760_000_000)
    assert this.name == "scan-20251009T085320Z"
    this.mkdir()
    assert reports_dir.finish(tmp_path, this, keep=2) == old[:2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "notes.txt", old[2].name, this.name]
    assert os.readlink(tmp_path / "latest") == this.name  # relative: the volume may be mounted elsewhere
    reports_dir.finish(tmp_path, this, keep=2)  # again: the link is replaced, not an error


def test_progress_lines() -> None:
    assert bar(5, 16, width=8) == "██░░░░░░ 5/16"
    assert bar(0, 0, width=4) == "░░░░ 0/0"
    stages = [Stage(3, 5, 16), Stage(4, 0, 2)]
    assert describe("reconciling", stages, 12.4, terminal=False) == \
        "scan-orphans [12 s] reconciling: stage 3 5/16 tasks, stage 4 0/2 tasks"
    assert describe("reconciling", [], 0, terminal=True) == "reconciling"
    assert "stage 3 ███░░░░░░░░░ 5/16" in describe("reconciling", stages, 0, terminal=True)
