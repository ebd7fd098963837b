"""Offloaded copies, on real ZooKeeper, pulsar-lite and moto_server.

5. A streaming segment holding several ledgers is deleted exactly when the last of
   them leaves its managed ledger's list: never before (a ledger still listed holds
   it), never left behind (acking each request as a mismatch would leave the segment
   with nothing referencing it).
6. Each part of an offloaded copy is looked for where it was written: a segment's
   own recorded location, not its context's (looking in the context's bucket finds
   nothing there, and the segment's objects would be orphaned).
8. An endpoint that accepts and never answers parks the requests that name it and
   costs genuine requests nothing (were it to open the lane's only breaker, with
   itself as the probe, the lane would stop for good).
"""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator

import pytest

from deletion_service.delete_phase.consumer.copies import DLQ_REASON
from deletion_service.mark_phase.trim import one_at_a_time, trim
from deletion_service.protocol.request import PendingDeleteLedgerInfo
from deletion_service.testing.offload_objects import build_index_v2, encode_ledger_info
from metastore import open_store
from metastore.formats import LedgerInfo, OffloadContext, OffloadSegment, Position, managed_ledger_name
from offloaders.allow_list import AllowList
from offloaders.interface import java_uuid
from offloaders.registry import OffloaderSettings
from tests.support.deletion_world import UPSTREAM_META, S3Bucket, World, make_world, read_dlq, request
from tests.support.harness import MotoS3Server, PulsarLiteBroker, ZooKeeperServer, free_port

TOPIC = "persistent://t/ns/streamed"


def _bucket(s3_server: MotoS3Server, prefix: str) -> S3Bucket:
    b = S3Bucket(s3_server.endpoint, f"{prefix}-{uuid.uuid4().hex[:8]}")
    b.client.create_bucket(Bucket=b.name)
    return b


@pytest.fixture
def buckets(s3_server: MotoS3Server) -> tuple[S3Bucket, S3Bucket]:
    return _bucket(s3_server, "old"), _bucket(s3_server, "new")


@pytest.fixture
def world(zk_url: str, zookeeper: ZooKeeperServer, pulsar_broker: PulsarLiteBroker,
          buckets: tuple[S3Bucket, S3Bucket]) -> Iterator[World]:
    store = open_store(zk_url)
    bk_store = open_store(f"{zookeeper.url}/bk-{uuid.uuid4().hex[:8]}")
    w = make_world(store, bk_store, pulsar_broker.service_url, twoPhaseDeletionReconsumeLaterInSeconds=0,
                   twoPhaseDeletionMaxRetryDeleteCount=3, minLedgerAgeSeconds=3600,
                   twoPhaseDeletionInUseGraceSeconds=1, offloadAllowedBuckets=[b.name for b in buckets])
    # Short S3 timeouts: an endpoint that never answers costs a second here, not a minute.
    w.service.offload = OffloaderSettings(AllowList.of(buckets=[b.name for b in buckets]),
                                          s3_connect_timeout=0.5, s3_read_timeout=0.8)
    w.service.gatherer.offload = w.service.executor.offload = w.service.offload
    yield w
    w.service.close()
    w.service.broker.close()
    store.close()
    bk_store.close()


def _location(bucket: S3Bucket) -> dict[str, str]:
    return {"bucket": bucket.name, "region": "us-east-1", "serviceEndpoint": bucket.endpoint}


def _upload_segment(bucket: S3Bucket, msb: int, lsb: int, ledger_ids: list[int], topic: str = TOPIC) -> set[str]:
    """A streaming segment holding ``ledger_ids``, stamped with its managed ledger as upstream does."""
    seg = java_uuid(msb, lsb)
    meta = {**UPSTREAM_META, "managedledgername": managed_ledger_name(topic)}
    index = build_index_v2({lid: encode_ledger_info(lid, 10, 1024) for lid in ledger_ids})
    bucket.client.put_object(Bucket=bucket.name, Key=seg, Body=b"segment", Metadata=meta)
    bucket.client.put_object(Bucket=bucket.name, Key=f"{seg}-index", Body=index, Metadata=meta)
    return {seg, f"{seg}-index"}


def _streamed(ledger_id: int, bucket: S3Bucket, *segments: tuple[int, int]) -> LedgerInfo:
    """A ledger offloaded into streaming segments (its BookKeeper copy deleted after the offload)."""
    ctx = OffloadContext(complete=True, bookkeeper_deleted=True, driver_name="aws-s3",
                         driver_metadata=_location(bucket),
                         segments=[OffloadSegment(uid_msb=m, uid_lsb=lsb, complete=True) for m, lsb in segments])
    return LedgerInfo(ledger_id, 10, 1024, offload_context=ctx)


def _trim(world: World) -> tuple[list[int], int]:
    """Trim the topic; the ledgers it removed and how many requests it sent."""
    sent = []

    def send(r: PendingDeleteLedgerInfo) -> str:
        sent.append(r)
        return world.service.send_pending_delete(r)

    result = trim(world.store, TOPIC, one_at_a_time(send), offline=True)
    assert result.aborted is None and not result.kept, result
    return result.removed, len(sent)


def _settled(world: World) -> int:
    return sum(1 for s in world.settled if s.outcome.value != "reconsumed")


# ---------------------------------------------------------------- 5. shared streaming segments


def test_a_shared_segment_goes_exactly_when_its_last_ledger_leaves_the_list(
        world: World, buckets: tuple[S3Bucket, S3Bucket]) -> None:
    bucket = buckets[0]
    s12 = _upload_segment(bucket, 0x51, 0x12, [1, 2])  # ledgers 1 and 2 only
    s24 = _upload_segment(bucket, 0x52, 0x24, [2, 4])  # ledger 2, and ledger 4 which stays listed
    world.writer.managed_ledger(TOPIC, [_streamed(1, bucket, (0x51, 0x12)),
                                        _streamed(2, bucket, (0x51, 0x12), (0x52, 0x24)),
                                        _streamed(4, bucket, (0x52, 0x24)), LedgerInfo(5)])
    world.writer.cursor(TOPIC, "sub", Position(4, 0))  # ledgers 1 and 2 are consumed, 4 is not
    world.start()

    removed, sent = _trim(world)
    assert removed == [1, 2]
    world.drain(lambda w: _settled(w) == sent, timeout_s=60)
    keys = bucket.keys()
    assert s12.isdisjoint(keys), "the segment of ledgers 1 and 2 was left behind once both left the list"
    assert s24 <= keys, "a segment was deleted while ledger 4, still listed, holds it"

    world.writer.cursor(TOPIC, "sub", Position(5, 0))  # now ledger 4 is consumed too
    removed, more = _trim(world)
    assert removed == [4]
    world.drain(lambda w: _settled(w) == sent + more, timeout_s=60)
    assert s24.isdisjoint(bucket.keys()), "the segment was left behind when its last ledger left the list"
    assert world.outcomes()["metadata_mismatch"] == 0, world.outcomes()


# ---------------------------------------------------------------- 6. a segment's own location


def test_each_part_of_an_offloaded_copy_is_deleted_where_it_was_written(
        world: World, buckets: tuple[S3Bucket, S3Bucket]) -> None:
    old, new = buckets
    per_ledger = set(old.offload_ledger(TOPIC, 1, 0x61, 0x01))  # the context's own objects, in the old bucket
    segment = _upload_segment(new, 0x62, 0x01, [1])  # written after the settings changed: the new bucket
    ctx = OffloadContext(uid_msb=0x61, uid_lsb=0x01, complete=True, bookkeeper_deleted=True, driver_name="aws-s3",
                         driver_metadata=_location(old),
                         segments=[OffloadSegment(uid_msb=0x62, uid_lsb=0x01, complete=True, driver_name="aws-s3",
                                                  driver_metadata=_location(new))])
    world.writer.managed_ledger(TOPIC, [LedgerInfo(1, 10, 1024, offload_context=ctx), LedgerInfo(2)])
    world.writer.cursor(TOPIC, "sub", Position(2, 0))
    world.start()

    removed, sent = _trim(world)
    assert removed == [1]
    world.drain(lambda w: _settled(w) == sent, timeout_s=60)
    assert per_ledger.isdisjoint(old.keys())
    assert segment.isdisjoint(new.keys()), "the segment was looked for in its context's bucket, not its own"


def test_a_request_naming_a_segments_own_location_is_decoded_strictly_and_allow_listed(
        world: World, buckets: tuple[S3Bucket, S3Bucket], s3_server: MotoS3Server) -> None:
    old, _ = buckets
    elsewhere = _bucket(s3_server, "not-allowed")
    segment = _upload_segment(elsewhere, 0x63, 0x01, [7])
    world.writer.managed_ledger(TOPIC, [LedgerInfo(8)])
    ctx = {"uidMsb": 0, "uidLsb": 0, "driverName": "aws-s3", "driverMetadata": _location(old),
           "segments": [{"uidMsb": 0x63, "uidLsb": 0x01, "driverName": "aws-s3",
                         "driverMetadata": _location(elsewhere)}]}
    world.start()
    world.service.send_pending_delete(request(TOPIC, 7, ledgerType="OFFLOAD_LEDGER", offloadContext=ctx,
                                              reason="manual"))
    world.drain(lambda w: sum(w.outcomes().values()) == 1, timeout_s=60)
    assert world.outcomes() == {"metadata_mismatch": 1}, "a segment's own location was ignored or not allow-listed"
    assert segment <= elsewhere.keys()


# ---------------------------------------------------------------- 8. an endpoint that never answers


class BlackHole:
    """A loopback port that accepts connections and never says a word."""

    def __init__(self) -> None:
        self.port = free_port()
        self.accepted = 0
        self._sock = socket.create_server(("127.0.0.1", self.port))
        self._open: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._open.append(conn)
            self.accepted += 1

    def close(self) -> None:
        self._sock.close()
        for conn in self._open:
            conn.close()


def test_an_endpoint_that_never_answers_costs_genuine_requests_nothing(
        world: World, buckets: tuple[S3Bucket, S3Bucket], pulsar_broker: PulsarLiteBroker) -> None:
    genuine = buckets[0]
    hole = BlackHole()
    try:
        objects = {lid: set(genuine.offload_ledger(TOPIC, lid, 0x81, lid)) for lid in range(1, 7)}
        world.writer.managed_ledger(TOPIC, [LedgerInfo(100)])
        worker = world.start()
        lane = worker.offload_lane
        assert lane is not None
        lane.hold_s = 0  # park at once: the retry budget, not the hold, is under test

        def send(lid: int, bucket: S3Bucket) -> None:
            world.service.send_pending_delete(request(TOPIC, lid, ledgerType="OFFLOAD_LEDGER",
                                                      offloadContext=bucket.offload_context(0x81, lid)))

        send(1, genuine)  # the genuine target has answered before the forged request arrives
        world.drain(lambda w: w.outcomes().get("deleted", 0) == 1, timeout_s=60)
        forged = S3Bucket(hole.endpoint, genuine.name)  # an allowed bucket, behind an endpoint that never answers
        world.service.send_pending_delete(request(TOPIC, 50, ledgerType="OFFLOAD_LEDGER",
                                                  offloadContext=forged.offload_context(0x81, 50)))
        world.drain(lambda w: hole.accepted > 0, timeout_s=60)
        for lid in range(2, 7):
            send(lid, genuine)
        world.drain(lambda w: w.outcomes().get("deleted", 0) == 6, timeout_s=60)
        assert all(objects[lid].isdisjoint(genuine.keys()) for lid in objects)

        # The forged request is parked with its reason, counted, and dead-lettered after the retry budget.
        world.drain(lambda w: w.outcomes().get("dlq", 0) == 1, timeout_s=120)
        [parked] = read_dlq(world, pulsar_broker.service_url)
        assert parked.properties()[DLQ_REASON] == "max-retries-reached"
        assert any("not answering" in s.action.reason for s in world.settled
                   if s.request is not None and s.request.ledger_id == 50)
        assert worker.dependencies_down() is None, "a request's endpoint made the daemon look unready"
        assert [k for k in lane.breakers.open_keys() if f":{hole.port}" in k], lane.breakers.open_keys()
    finally:
        hole.close()
