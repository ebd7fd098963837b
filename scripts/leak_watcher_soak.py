#!/usr/bin/env python3
"""Leak soak: stock brokers that delete in one phase leak at random while the daemon replica that
watches is SIGKILLed at random moments and at the watcher's failpoints; then judge.

    python scripts/leak_watcher_soak.py --minutes 30 [--seed S] [--replicas 2] [--topics 12] [--keep DIR]

Real ZooKeeper, a pulsar-lite process, ``moto_server`` and ``ledger-deletion run`` replicas, as the
test suite's short run (``tests/system/leak_watcher/test_randomized_leaks.py``) starts them; the
engine is ``tests/support/leak_scenario.py``.  The last line is JSON: leaks injected, missed and
deleted, copies the brokers deleted themselves and any of them requested, live copies requested or
missing, and ``leaked`` requests the delete phase refused as still in use.  Exit 0 when nothing was
missed, requested wrongly or lost.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import boto3  # noqa: E402 - after the path is set

from tests.support.deletion_world import S3Bucket  # noqa: E402
from tests.support.harness import MotoS3Server, PulsarLiteBroker, ZooKeeperServer  # noqa: E402
from tests.support.leak_scenario import LeakScenario  # noqa: E402
from tests.support.replicas_world import ReplicaWorld  # noqa: E402


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--minutes", type=float, required=True, help="how long the brokers leak")
    parser.add_argument("--seed", type=int, default=None, help="replay a run's choices (default: random)")
    parser.add_argument("--replicas", type=int, default=2, help="daemon replicas (default 2)")
    parser.add_argument("--topics", type=int, default=12, help="topics the brokers start with (default 12)")
    parser.add_argument("--keep", type=Path, default=None, help="run in DIR and keep its logs")
    parser.add_argument("--min-life", type=float, default=15.0,
                        help="seconds a copy stays referenced at least (default 15: a hand-over leaves nobody "
                             "watching for up to a session timeout and a pass, ~11 s; a copy born and gone inside "
                             "that window is the scan's)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")  # moto_server takes any credentials
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    root = args.keep or Path(tempfile.mkdtemp(prefix="leak-soak-"))
    print(f"[leak soak] seed {seed}, {args.minutes:g} min, {args.replicas} replicas, in {root}", file=sys.stderr)
    zookeeper = ZooKeeperServer(root / "zookeeper").start()
    broker = PulsarLiteBroker(root / "pulsar-lite").start()
    s3 = MotoS3Server(root / "moto").start()
    world: ReplicaWorld | None = None
    try:
        world = ReplicaWorld(root / "world", f"{zookeeper.url}/soak", broker.service_url)
        with world.config.open("a") as config:
            config.write("ledgerDeletionLeakWatcherSettleSeconds = 2\nledgerDeletionLeakWatcherPassSeconds = 1\n")
        bucket = S3Bucket(s3.endpoint, f"leaks-{uuid.uuid4().hex[:8]}")
        boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1").create_bucket(Bucket=bucket.name)
        scenario = LeakScenario(world, bucket, seed, replicas=args.replicas, topics=args.topics,
                                min_life_s=args.min_life)
        scenario.start()
        scenario.run(args.minutes * 60)
        result = scenario.judge(timeout_s=180)
    finally:
        if world is not None:
            world.close()
        s3.stop()
        broker.stop()
        zookeeper.stop()
    print(json.dumps(result))
    bad = ("leaksMissed", "requestedThoughDeletedByBroker", "liveRequested", "liveMissing")
    return 0 if not any(result[k] for k in bad) and result["wrongRequestsRefusedInUse"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
