"""SIGTERM a replica while its offload lane deletes.

A rolling restart SIGTERMs replicas one at a time.  The daemon used to stop its batch loop, then
the lane (2 s per thread), and exit: an offloaded copy whose delete the store applied while its
reply was on the way (a slow endpoint) was gone, its request never settled (no record, no ack),
and the sibling that got the redelivered request found the objects absent and recorded ``absent``.
The trails said nobody deleted the copy.  Now a stop lets the lane's deletes in hand be answered
and settles them, recorded and acked, until ``LANE_STOP_WAIT_S`` after SIGTERM.

Real processes: two ``run`` replicas (the second started after the first exited), pulsar-lite (the
session's), ZooKeeper (a chroot), moto_server behind a loopback proxy that applies each delete at
once and answers it 8 s later (a fault moto cannot produce on its own).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.deletion_world import S3Bucket
from tests.support.harness import MotoS3Server, PulsarLiteBroker, wait_until
from tests.support.replica_tools import SlowDeletes, bucket_behind_slow_deletes, enqueue_offload, settled
from tests.support.replicas_world import ReplicaWorld


@pytest.fixture
def world(tmp_path: Path, zk_url: str, pulsar_broker: PulsarLiteBroker) -> Iterator[ReplicaWorld]:
    w = ReplicaWorld(tmp_path, zk_url, pulsar_broker.service_url, scope="cluster")
    yield w
    w.close()


@pytest.fixture
def late_replies(s3_server: MotoS3Server) -> Iterator[tuple[SlowDeletes, S3Bucket]]:
    with bucket_behind_slow_deletes(s3_server, delay_s=8.0, reply_late=True) as slow:
        yield slow


def test_a_replica_stopped_while_its_offload_delete_is_answered_leaves_a_record_of_it(
        world: ReplicaWorld, late_replies: tuple[SlowDeletes, S3Bucket]) -> None:
    proxy, bucket = late_replies
    first, second = world.add_replicas(2)
    first.start().wait_ready()
    ledger = 50_000
    names = bucket.offload_ledger(world.topic, ledger, 0x2345, 0x6789)  # an orphan copy
    enqueue_offload(world, bucket, proxy.endpoint, ledger, 0x2345, 0x6789)
    assert proxy.deletes_applied.wait(60), "the first replica never deleted the copy"

    assert first.stop() == 0  # SIGTERM, as a rolling restart sends it
    left = bucket.keys()
    assert names[0] not in left, "the data object's delete, applied by the store, is not applied"
    second.start().wait_ready()  # gets the request the first left unacked
    wait_until(lambda: bool(settled(world, ledger)), 60, "the redelivered request settled", interval=0.3)
    by_replica = {r.name: [(a["outcome"], [o["key"] for o in a["evidence"].get("offloadObjects") or []])
                           for a in r.audit() if a["request"].get("ledgerId") == ledger] for r in world.replicas}
    recorded = {key for records in by_replica.values() for _, keys in records for key in keys}
    assert names[0] in recorded, (
        f"{names[0]} was deleted by {first.name}, stopped with SIGTERM while the store's answer was on the way, "
        f"and no audit trail records its deletion: {by_replica}")
