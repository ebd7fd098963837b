"""Where a scheduled scan keeps its reports: one directory per scan under ``--reports-dir``, the
newest ``--keep-reports`` kept, ``latest`` pointing at the newest.

Why: a CronJob's pod is gone when the scan ends, so a report written to the pod's own disk is
thrown away; on a volume that outlives the pod (the chart's claim) the operator finds each run's
``report.html`` and Parquet tables by its time, and ``latest`` without looking.  Names sort by
time (UTC, ``scan-YYYYMMDDTHHMMSSZ``), so pruning keeps the newest by name, never by mtime (a
copied volume keeps names, not always times).
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

PREFIX = "scan-"
LATEST = "latest"


def run_dir(root: Path, started_s: float) -> Path:
    """This scan's directory (not yet created): ``root/scan-<UTC time it started>``."""
    stamp = datetime.fromtimestamp(started_s, tz=UTC).strftime("%Y%m%dT%H%M%SZ")
    return root / f"{PREFIX}{stamp}"


def finish(root: Path, written: Path, keep: int) -> list[Path]:
    """Point ``latest`` at ``written`` and remove all but the newest ``keep`` scans; the removed."""
    link = root / LATEST
    tmp = root / f".{LATEST}.tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(written.name)  # relative: the volume may be mounted elsewhere when read
    tmp.replace(link)
    runs = sorted(p for p in root.iterdir() if p.name.startswith(PREFIX) and p.is_dir() and not p.is_symlink())
    removed = runs[:-keep] if keep > 0 else []
    for old in removed:
        shutil.rmtree(old)
    return removed
