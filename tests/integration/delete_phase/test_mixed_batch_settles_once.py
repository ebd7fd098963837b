"""A batch mixing BookKeeper and offload requests settles each message exactly once.

Found while restructuring the worker around the lifecycle table: the
worker chose what to dispose of by reading each message's stage after the
BookKeeper deletes; an offload request the lane's thread had decided in the
meantime read ``decided`` too, so the worker disposed of it and the lane handed
it back again — counted, audited and reported twice (the demo's tally showed 17
offloaded copies deleted of 15).  The failpoint between the BookKeeper deletes
and the offload lane holds the worker for a second, long enough for the lane to
decide, on the real ZooKeeper, pulsar-lite and moto_server.
"""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from deletion_service import failpoints
from deletion_service.cluster_writer import pulsar_custom_metadata
from deletion_service.protocol.fate import Outcome
from tests.support.deletion_world import S3Bucket, World, request
from tests.support.harness import MotoS3Server
from tests.support.tiered_storage_world import TOPIC, world

__all__ = ["world"]  # the fixture: a deletion service on the real ZooKeeper and broker


@pytest.fixture
def lane_overtakes_worker() -> object:
    failpoints.configure("delete.between-bookkeeper-and-offload=sleep:1@0")
    yield
    failpoints.configure("")


def test_an_offload_request_the_lane_decides_first_is_settled_once(
        world: World, s3_server: MotoS3Server, lane_overtakes_worker: object) -> None:
    bucket = S3Bucket(s3_server.endpoint, f"b-{uuid.uuid4().hex[:8]}")
    bucket.client.create_bucket(Bucket=bucket.name)
    offloaded = [51, 52]
    for lid in offloaded:
        bucket.offload_ledger(TOPIC, lid, 100 + lid, 1)
    world.writer.bk_ledger(50, pulsar_custom_metadata(TOPIC))
    world.start()
    world.service.send_pending_delete(request(TOPIC, 50))
    for lid in offloaded:
        world.service.send_pending_delete(request(TOPIC, lid, ledgerType="OFFLOAD_LEDGER",
                                                  offloadContext=bucket.offload_context(100 + lid, 1)))
    world.drain(lambda w: sum(n for o, n in w.outcomes().items() if o != Outcome.RECONSUMED.value) >= 3,
                timeout_s=60)
    worker = world.worker
    assert worker is not None
    for _ in range(5):  # anything the lane hands back late would settle now
        worker.run_once(0.2)
    settled = Counter((s.request.ledger_id, s.request.ledger_type.value) for s in world.settled
                      if s.request is not None and s.outcome != Outcome.RECONSUMED)
    assert settled == {(50, "LEDGER"): 1, (51, "OFFLOAD_LEDGER"): 1, (52, "OFFLOAD_LEDGER"): 1}
    assert world.service.metrics.value("pulsar_ledger_deletion_acked_total", {"outcome": "deleted"}) == 3
