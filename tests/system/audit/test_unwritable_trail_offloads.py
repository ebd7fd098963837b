"""Offloaded copies under a trail the daemon cannot write: the offload lane deletes on its own threads,
so it must stop with the rest.  Every copy gone from S3 must be one the trail records ``deleted``, but
for at most the batches the lane had in hand when the trail refused (its batch, and the one request of
its probation thread); once the trail is writable, every copy is recorded ``deleted`` exactly once.

Real processes: ``ledger-deletion run`` on the session's ZooKeeper (a chroot) and pulsar-lite, moto_server
behind a loopback proxy that holds each DELETE a little (so the drain is under way when the trail
refuses).  Needs root and a file system with ``chattr``.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.audited_drain import immutable
from tests.support.deletion_world import S3Bucket
from tests.support.harness import MotoS3Server, PulsarLiteBroker, wait_until
from tests.support.replica_tools import SlowDeletes, bucket_behind_slow_deletes
from tests.support.replicas_world import ReplicaWorld

BATCH = 5
COPIES = 60


@pytest.fixture
def world(tmp_path: Path, zk_url: str, pulsar_broker: PulsarLiteBroker) -> Iterator[ReplicaWorld]:
    w = ReplicaWorld(tmp_path, zk_url, pulsar_broker.service_url, scope="cluster")
    w.config.write_text(w.config.read_text() + f"twoPhaseDeletionBatchSize = {BATCH}\n")
    yield w
    w.close()


@pytest.fixture
def slow_s3(s3_server: MotoS3Server) -> Iterator[tuple[SlowDeletes, S3Bucket]]:
    with bucket_behind_slow_deletes(s3_server, delay_s=0.05) as slow:
        yield slow


def _gone(bucket: S3Bucket, copies: dict[int, list[str]]) -> set[int]:
    keys = bucket.keys()
    return {ledger for ledger, names in copies.items() if not keys & set(names)}


def _recorded_deleted(world: ReplicaWorld) -> list[int]:
    return [r["request"]["ledgerId"] for rep in world.replicas for r in rep.audit() if r["outcome"] == "deleted"]


def _settled_down(bucket: S3Bucket, copies: dict[int, list[str]], quiet_s: float, within_s: float) -> set[int]:
    """The copies gone once none has gone for ``quiet_s`` (or after ``within_s``)."""
    deadline = time.monotonic() + within_s
    gone, since = _gone(bucket, copies), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < quiet_s:
        time.sleep(0.2)
        now = _gone(bucket, copies)
        if now != gone:
            gone, since = now, time.monotonic()
    return gone


@pytest.mark.slow
def test_the_offload_lane_deletes_no_further_batch_while_the_trail_refuses(
        world: ReplicaWorld, slow_s3: tuple[SlowDeletes, S3Bucket]) -> None:
    proxy, bucket = slow_s3
    [daemon] = world.add_replicas(1)
    daemon.start().wait_ready()
    copies: dict[int, list[str]] = {}
    lines = []
    for k in range(COPIES):
        ledger, msb, lsb = 50_000 + k, 0x1000 + k, 0x2000 + k
        copies[ledger] = bucket.offload_ledger(world.topic, ledger, msb, lsb)  # orphans: no managed ledger lists them
        context = {**bucket.offload_context(msb, lsb), "driverMetadata": {
            "bucket": bucket.name, "region": "us-east-1", "serviceEndpoint": proxy.endpoint}}
        lines.append(json.dumps({"topicName": world.topic, "ledgerComponent": "MANAGED_LEDGER",
                                 "ledgerType": "OFFLOAD_LEDGER", "ledgerId": ledger, "offloadContext": context,
                                 "reason": "orphan"}))
    requests = world.root / "offloads.jsonl"
    requests.write_text("\n".join(lines) + "\n")
    out = subprocess.run([*world.argv(world.root / "enqueue-data"), "enqueue", "--from-file", str(requests)],
                         env=world.env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    wait_until(lambda: len(_recorded_deleted(world)) >= 2 * BATCH, 60, "the drain under way", interval=0.2)

    files = sorted((daemon.data_dir / "audit").glob("audit-*.jsonl"))
    with immutable(files[-1]):
        gone = _settled_down(bucket, copies, quiet_s=3, within_s=60)
        unrecorded = gone - set(_recorded_deleted(world))
        assert len(unrecorded) <= BATCH + 1, (len(unrecorded), len(gone))
        assert len(gone) < COPIES, "the drain did not stop while the trail refused"
    wait_until(lambda: _gone(bucket, copies) == set(copies), 120, "every copy deleted", interval=0.5)
    wait_until(lambda: set(_recorded_deleted(world)) == set(copies), 30, "every copy recorded", interval=0.5)
    recorded = _recorded_deleted(world)
    assert len(recorded) == len(set(recorded)), "a copy recorded deleted twice"
