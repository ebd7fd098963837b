"""Shares of a py-spy profile of the daemon, by what the delete phase was doing.

    python -m bench.profile_shares PROFILE.folded

Reads py-spy's raw (folded) output, ``--threads``: one line per distinct stack,
``thread;frame;frame;... count``.  Each sample is put in the first category (in the
order of :data:`CATEGORIES`) whose marker appears in its stack, innermost frames
first; samples of the delete-phase thread that match none are "other (worker)".
Prints the share of the worker thread's samples, and of the whole process's.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

#: (category, markers): a marker is a substring of one frame ("function (file:line)").
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("audit append", ("audit/writer.py", "audit/record.py")),
    ("logging", ("logging/__init__.py", "_log_outcome", "logs.py")),
    ("metrics", ("prometheus_client",)),
    ("ack", (" ack (", "acknowledge")),
    ("receive", ("intake.py",)),
    ("decode", ("_admit (",)),
    ("delete (ZooKeeper multis)", ("execute.py", "delete_many")),
    ("decide", ("decision.py", "_decide (")),
    ("gather", ("gather.py",)),
    ("evidence", ("Evidence", "facts.py")),
    ("dispose (publish copies, lifecycle)", ("disposer.py", "lifecycle.py")),
)


def categorize(frames: list[str]) -> str:
    for name, markers in CATEGORIES:
        for frame in reversed(frames):
            if any(m in frame for m in markers):
                return name
    return "other (worker)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    args = parser.parse_args()
    by_thread: Counter[str] = Counter()
    worker: Counter[str] = Counter()
    for line in args.profile.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        n = int(count)
        thread = frames[0]
        by_thread[thread] += n
        if any("worker.py" in f for f in frames):
            worker[categorize(frames)] += n
    total = sum(by_thread.values())
    in_worker = sum(worker.values())
    print(f"process samples: {total}; delete-phase worker samples: {in_worker} ({in_worker / total:.0%})")
    for name, n in worker.most_common():
        print(f"  {name:<38}{n:>7}{n / in_worker:>7.0%}")
    print("by thread:")
    for thread, n in by_thread.most_common(8):
        print(f"  {thread[:60]:<62}{n / total:>6.0%}")


if __name__ == "__main__":
    main()
