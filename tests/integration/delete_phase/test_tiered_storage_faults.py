"""Tiered-storage faults: retried in-process, reconsumed, dead-lettered — while other requests flow.

The S3 server is a real ``moto_server``; faults it cannot produce on demand
(5xx, throttling, a hang past the client's timeout) come from the loopback
fault proxy in ``tests/support/fault_proxy.py`` placed in front of it.
"""

from __future__ import annotations

import itertools
import uuid

import pytest

from deletion_service.cluster_writer import pulsar_custom_metadata
from tests.support.deletion_world import S3Bucket, World, request
from tests.support.fault_proxy import Fault, FaultProxy
from tests.support.harness import MotoS3Server
from tests.support.tiered_storage_world import TOPIC, world

__all__ = ["world"]  # the fixture: a deletion service on the real ZooKeeper and broker


def _send(world: World, bucket: S3Bucket, endpoint: str, n_offload: int = 3, n_bk: int = 20,
          upload: bool = True) -> tuple[set, set]:
    ids = itertools.count(1)
    objects: set[str] = set()
    bk_ids = set()
    for _ in range(n_bk):
        lid = next(ids)
        world.writer.bk_ledger(lid, pulsar_custom_metadata(TOPIC))
        bk_ids.add(lid)
    world.start()
    faulty = S3Bucket(endpoint, bucket.name)
    for i in range(n_offload):
        lid = next(ids)
        if upload:
            objects.update(bucket.offload_ledger(TOPIC, lid, 77, i))
        world.service.send_pending_delete(request(TOPIC, lid, ledgerType="OFFLOAD_LEDGER",
                                                  offloadContext=faulty.offload_context(77, i)))
    for lid in sorted(bk_ids):
        world.service.send_pending_delete(request(TOPIC, lid))
    return objects, bk_ids


def _run(world: World, bucket: S3Bucket, endpoint: str, n_offload: int = 3, n_bk: int = 20,
         upload: bool = True) -> tuple[set, set]:
    objects, bk_ids = _send(world, bucket, endpoint, n_offload, n_bk, upload)
    world.drain(lambda w: sum(w.outcomes().values()) >= n_offload + n_bk, timeout_s=180)
    return objects, bk_ids


def _held_through_the_outage(world: World, bk_ids: set, n_offload: int) -> None:
    """BookKeeper deletions went on; the offload requests wait in their lane, none retried or dead-lettered."""
    worker = world.worker
    assert worker is not None and worker.offload_lane is not None
    world.drain(lambda w: w.outcomes().get("deleted", 0) == len(bk_ids)
                and worker.offload_lane.breakers.open_keys() and worker.offload_lane.held == n_offload, timeout_s=120)
    assert not any(world.bk_exists(lid) for lid in bk_ids)
    assert {s.outcome.value for s in world.settled} == {"deleted"}, "no offload request reconsumed or dead-lettered"
    assert world.service.metrics.value("pulsar_ledger_deletion_max_retry_reached_total") == 0


@pytest.mark.parametrize("fault", [Fault.status(500), Fault.status(503, "SlowDown"), Fault.status(429),
                                   Fault.delay(3.0), Fault.reset()], ids=["500", "slowdown", "429", "timeout", "reset"])
def test_s3_faults_hold_offloads_while_bookkeeper_deletions_flow(world: World, s3_server: MotoS3Server,
                                                                 fault: Fault) -> None:
    bucket = S3Bucket(s3_server.endpoint, f"b-{uuid.uuid4().hex[:8]}")
    bucket.client.create_bucket(Bucket=bucket.name)
    with FaultProxy(s3_server.endpoint) as proxy:
        proxy.set_fault(fault)
        objects, bk_ids = _send(world, bucket, proxy.endpoint)
        _held_through_the_outage(world, bk_ids, 3)
        assert objects <= bucket.keys()  # nothing of the offloaded copies was touched
        proxy.set_fault(None)  # the endpoint answers again: the held requests run, uncounted
        world.drain(lambda w: w.outcomes().get("deleted", 0) == len(bk_ids) + 3, timeout_s=120)
    assert objects.isdisjoint(bucket.keys())
    assert world.worker is not None and world.worker.dependencies_down() is None


def test_a_stopped_s3_server_holds_offloads_until_it_is_back(world: World, tmp_path) -> None:  # noqa: ANN001
    # A private S3 server: this test stops it, the session's stays up.
    server = MotoS3Server(tmp_path / "moto").start()
    try:
        bucket = S3Bucket(server.endpoint, "stopped")
        bucket.client.create_bucket(Bucket="stopped")
        objects = {key for i in range(2) for key in bucket.offload_ledger(TOPIC, 100 + i, 77, i)}
        server.stop()
        _, bk_ids = _send(world, bucket, server.endpoint, n_offload=0, n_bk=5)
        for i in range(2):
            world.service.send_pending_delete(request(TOPIC, 100 + i, ledgerType="OFFLOAD_LEDGER",
                                                      offloadContext=bucket.offload_context(77, i)))
        _held_through_the_outage(world, bk_ids, 2)
        server.start()  # the same port; moto keeps nothing, so the objects are gone: "absent" is the honest end
        bucket.client.create_bucket(Bucket="stopped")
        world.drain(lambda w: sum(w.outcomes().values()) == 7, timeout_s=120)
    finally:
        server.stop()
    assert world.outcomes() == {"deleted": 5, "absent": 2}
    assert objects


@pytest.mark.parametrize("world", [1], indirect=True)  # retries wait a second
def test_transient_faults_then_recovery_deletes(world: World, s3_server: MotoS3Server) -> None:
    bucket = S3Bucket(s3_server.endpoint, f"b-{uuid.uuid4().hex[:8]}")
    bucket.client.create_bucket(Bucket=bucket.name)
    with FaultProxy(s3_server.endpoint) as proxy:
        # Enough failures that every request's first attempt (three in-process tries each) fails.
        proxy.set_fault(Fault.status(503, "SlowDown"), times=9)
        objects, _ = _run(world, bucket, proxy.endpoint, n_offload=3, n_bk=2)
    outcomes = world.outcomes()
    assert outcomes == {"deleted": 5}
    # Each request spent its in-process tries; what happens next depends on whether the target's probe
    # met a fault too (held, uncounted) or not (reconsumed, counted): never more than once each.
    assert len([s for s in world.settled if s.outcome.value == "reconsumed"]) <= 3
    assert objects.isdisjoint(bucket.keys())
