#!/usr/bin/env python3
"""Fault soak: SIGKILL trim, the daemon, cursor reset and the embedded broker at every failpoint and at
random moments, on real ZooKeeper, the embedded broker and an S3 server; then drain and judge.

    python scripts/soak.py --kills 1000 [--seed S] [--json] [--max-minutes M] [--keep DIR] [--replicas N]

``--replicas N``: N daemons, each its own data dir and admin port, on one external
pulsar-lite process, sharing the Shared subscription; faults hit one replica at a time (default 1:
one daemon on its data dir's embedded broker).

The last line is JSON: {"kills", "failpoints": [...], "requests", "deleted", "wronglyDeleted",
"orphansLeft", "deletedTwice", "leakedProcesses", "recoverySeconds", ...}.  Exit 0 when the three
invariants held (nothing wrongly deleted, no orphan left, no request deleted twice across the audit
trails) and no process leaked, 1 otherwise.  The engine lives in ``tests/support/soak/run.py`` (the test suite runs
a bounded soak with it); this is only its command line.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.soak.run import run_soak  # noqa: E402 - after the path is set


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--kills", type=int, required=True, help="how many faults to inject")
    parser.add_argument("--seed", type=int, default=None, help="replay a run's choices (default: random)")
    parser.add_argument("--json", action="store_true", help="only progress lines, then the JSON line")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="start no new fault after this many minutes (then drain and judge)")
    parser.add_argument("--keep", type=Path, default=None, help="run in DIR and keep its logs")
    parser.add_argument("--replicas", type=int, default=1,
                        help="daemons sharing the subscription on one external pulsar-lite (default 1: embedded)")
    args = parser.parse_args(argv)
    if args.replicas < 1:
        parser.error("--replicas must be at least 1")
    # SIGTERM (how a background run is stopped; a background job ignores SIGINT) unwinds like Ctrl-C,
    # so the soak stops every process it started before exiting.
    signal.signal(signal.SIGTERM, _interrupt)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    print(f"[soak] seed {seed}, {args.kills} faults, {args.replicas} daemon(s)", file=sys.stderr, flush=True)
    result = run_soak(args.kills, seed, log=lambda s: print(s, file=sys.stderr, flush=True), root=args.keep,
                      budget_s=None if args.max_minutes is None else args.max_minutes * 60, replicas=args.replicas)
    ok = all(result[k] == 0 for k in ("wronglyDeleted", "orphansLeft", "deletedTwice", "leakedProcesses"))
    if not args.json:
        for key in ("killsByFault", "missedFailpoints", "recoverySeconds", "daemonShutdownSeconds", "drain",
                    "figures", "violations", "notes"):
            print(f"{key}: {json.dumps(result[key])}")
        print("invariants held, nothing leaked" if ok else "FAILED: see violations")
    core = ["kills", "failpoints", "requests", "deleted", "wronglyDeleted", "orphansLeft", "deletedTwice"]
    print(json.dumps({**{k: result[k] for k in core}, **{k: v for k, v in result.items() if k not in core}}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
