"""Forged, racing and poison requests, each on real ZooKeeper, pulsar-lite and moto_server.

Every test here failed on the code before the fix (see the issue for the
reproductions) and pins the rule that closed it: references are checked under
the identity BookKeeper's metadata proves, a mark-phase request still listed is
looked at again within a grace window, one message's failure stays with that
message, unverifiable offloads are never deleted, and no delay comes from a
message.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Iterator

import pytest

from deletion_service.cluster_writer import pulsar_custom_metadata, schema_custom_metadata
from deletion_service.delete_phase.consumer.copies import (
    DELAY_TIME,
    DLQ_PAYLOAD_SHA256,
    DLQ_PAYLOAD_SIZE,
    DLQ_PAYLOAD_TRUNCATED,
    DLQ_REASON,
    MAX_DLQ_BODY,
    RECONSUMETIMES,
)
from deletion_service.delete_phase.rules.decision import Verdict
from deletion_service.mark_phase.trim import one_at_a_time, trim
from deletion_service.protocol.request import PendingDeleteLedgerInfo, decode_payload
from deletion_service.service import SyncOutcome
from deletion_service.testing.offload_objects import build_index_v1, encode_ledger_metadata_format
from metastore import open_store
from metastore.formats import LedgerInfo, Position, schema_id
from offloaders.interface import java_uuid
from tests.support.deletion_world import DAY_MS, UPSTREAM_META, S3Bucket, World, make_world, now_ms, read_dlq, request
from tests.support.harness import MotoS3Server, PulsarLiteBroker, ZooKeeperServer, wait_until

GRACE_S = 2


@pytest.fixture
def bucket(s3_server: MotoS3Server) -> S3Bucket:
    b = S3Bucket(s3_server.endpoint, f"tiered-{uuid.uuid4().hex[:8]}")
    b.client.create_bucket(Bucket=b.name)
    return b


def _world(zk_url: str, zookeeper: ZooKeeperServer, broker_url: str, bucket: S3Bucket, **config: object) -> World:
    store = open_store(zk_url)
    bk_store = open_store(f"{zookeeper.url}/bk-{uuid.uuid4().hex[:8]}")
    return make_world(store, bk_store, broker_url, twoPhaseDeletionReconsumeLaterInSeconds=0,
                      twoPhaseDeletionMaxRetryDeleteCount=3, minLedgerAgeSeconds=3600,
                      offloadAllowedBuckets=[bucket.name], twoPhaseDeletionInUseGraceSeconds=GRACE_S, **config)


@pytest.fixture
def world(zk_url: str, zookeeper: ZooKeeperServer, pulsar_broker: PulsarLiteBroker,
          bucket: S3Bucket) -> Iterator[World]:
    w = _world(zk_url, zookeeper, pulsar_broker.service_url, bucket)
    yield w
    w.service.close()
    w.service.broker.close()
    w.store.close()
    w.bk_store.close()


def send_raw(world: World, data: bytes, topic: str | None = None, properties: dict[str, str] | None = None) -> None:
    producer = world.service.publisher._producer(topic or world.service.topics.partition_topics[0])  # noqa: SLF001
    producer.send(data, properties or {})


def settled_of(world: World, ledger_id: int) -> list[str]:
    return [s.outcome.value for s in world.settled if s.request is not None and s.request.ledger_id == ledger_id]


def raw_request(**fields: object) -> bytes:
    body = {"topicName": "persistent://t/ns/x", "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER",
            "ledgerId": 1, "markedAt": now_ms(), "reason": "manual", **fields}
    return json.dumps(body).encode()


# ---------------------------------------------------------------- 1. forged schema request


def test_forged_schema_request_never_deletes_a_live_schema_ledger(world: World,
                                                                 pulsar_broker: PulsarLiteBroker) -> None:
    w = world.writer
    live, unrelated = "persistent://t/ns/live", "persistent://t/ns/unrelated"
    w.bk_ledger(500, schema_custom_metadata(live), ctime_ms=now_ms() - 2 * DAY_MS)
    w.schema(live, [500])
    forged = raw_request(topicName=unrelated, ledgerComponent="SCHEMA_STORAGE", schemaId=schema_id(live),
                         ledgerId=500, reason="manual", markedAt=now_ms() - 2 * DAY_MS)
    world.start()
    send_raw(world, forged)
    world.drain(lambda wd: len(wd.settled) >= 1)
    assert world.bk_exists(500), "a live schema ledger was deleted by a forged request"
    assert [m.properties()[DLQ_REASON] for m in read_dlq(world, pulsar_broker.service_url)] == ["invalid-request"]
    # Even a request that slipped past validation is checked under the schema BookKeeper names.
    slipped = PendingDeleteLedgerInfo.model_construct(**{
        **PendingDeleteLedgerInfo.model_validate_json(raw_request(ledgerId=500)).__dict__,
        "topic_name": unrelated, "ledger_component": "SCHEMA_STORAGE", "schema_id": schema_id(live),
        "marked_at": now_ms() - 2 * DAY_MS})
    [action] = world.service.pipeline.run([slipped], [0], world.service.policy)
    assert action.verdict == Verdict.ACK_IN_USE and "schema ledger" in action.reason
    assert world.bk_exists(500)


# ---------------------------------------------------------------- 2. trim racing the daemon


def test_trim_racing_the_daemon_leaves_no_orphan(world: World) -> None:
    """The daemon consumes trim's requests before trim's metadata write: within the grace they
    are looked at again, and once the write lands, deleted."""
    w, svc = world.writer, world.service
    topic = "persistent://t/ns/raced"
    ids = [600, 601, 602]
    for lid in ids:
        w.bk_ledger(lid, pulsar_custom_metadata(topic))
    w.managed_ledger(topic, [*ids, LedgerInfo(603)])
    w.cursor(topic, "sub", Position(603, 0))
    worker = world.start()

    def send_and_let_the_daemon_run(r: PendingDeleteLedgerInfo) -> str:
        mid = svc.send_pending_delete(r)
        deadline = time.monotonic() + 20
        while not settled_of(world, r.ledger_id):  # the daemon settles it *before* trim writes
            assert time.monotonic() < deadline
            worker.run_once(0.1)
        return mid

    result = trim(world.store, topic, one_at_a_time(send_and_let_the_daemon_run), offline=True)
    assert result.removed == ids
    assert all(settled_of(world, lid) == ["reconsumed"] for lid in ids), world.settled
    world.drain(lambda wd: all("deleted" in settled_of(wd, lid) for lid in ids), timeout_s=60)
    assert not any(world.bk_exists(lid) for lid in ids), "ledgers left the list and were never deleted"


def test_trim_killed_between_send_and_write_deletes_nothing(world: World) -> None:
    """Requests sent, metadata never written: after the grace the ledgers are still in use."""
    w, svc = world.writer, world.service
    topic = "persistent://t/ns/crashed"
    w.bk_ledger(610, pulsar_custom_metadata(topic))
    w.managed_ledger(topic, [610, LedgerInfo(611)])
    world.start()
    svc.send_pending_delete(request(topic, 610, reason="trim"))  # ... and trim dies here
    world.drain(lambda wd: "still_in_use" in settled_of(wd, 610), timeout_s=60)
    assert settled_of(world, 610)[0] == "reconsumed", "acked at once: an orphan if trim had written"
    assert world.bk_exists(610)


# ---------------------------------------------------------------- 4. poison messages


POISON = [
    b"[" * 100_000,  # RecursionError in json
    b'{"ledgerId": ' + b"9" * 5000 + b"}",  # ValueError: integer string limit
    raw_request(ledgerId={"a": [1, 2]}),  # wrong type
    raw_request(topicName=["persistent://t/ns/x"]),
    b"\xc3\x28\xa0\xa1",  # invalid UTF-8
    raw_request(markedAt=1e400),  # not a finite number once parsed
]


def test_poison_messages_go_to_the_dlq_and_never_stall_their_batch(world: World,
                                                                   pulsar_broker: PulsarLiteBroker) -> None:
    w = world.writer
    topic = "persistent://t/ns/poisoned"
    w.bk_ledger(700, pulsar_custom_metadata(topic))
    world.start()
    for p in POISON:
        send_raw(world, p)
    world.service.send_pending_delete(request(topic, 700))
    world.drain(lambda wd: len(wd.settled) >= len(POISON) + 1)
    assert settled_of(world, 700) == ["deleted"]
    assert not world.bk_exists(700)
    reasons = [m.properties()[DLQ_REASON] for m in read_dlq(world, pulsar_broker.service_url)]
    assert reasons == ["invalid-request"] * len(POISON)


# ---------------------------------------------------------------- 5. a large malformed payload


def test_a_large_malformed_payload_reaches_the_dlq_truncated(world: World, pulsar_broker: PulsarLiteBroker) -> None:
    big = b'{"topicName": "' + b"x" * (3 * 1024 * 1024) + b'"'  # 3 MiB: twice that would exceed 5 MB
    world.start()
    send_raw(world, big)
    world.drain(lambda wd: len(wd.settled) >= 1, timeout_s=60)
    [copy] = read_dlq(world, pulsar_broker.service_url)
    props = copy.properties()
    assert props[DLQ_REASON] == "invalid-request"
    assert props[DLQ_PAYLOAD_TRUNCATED] == "true"
    assert int(props[DLQ_PAYLOAD_SIZE]) == len(big)
    assert props[DLQ_PAYLOAD_SHA256] == hashlib.sha256(big).hexdigest()
    assert copy.data() == big[:MAX_DLQ_BODY]


# ---------------------------------------------------------------- 6. dry run through the admin path


def test_dry_run_answers_would_delete_and_deletes_nothing(zk_url: str, zookeeper: ZooKeeperServer,
                                                          pulsar_broker: PulsarLiteBroker, bucket: S3Bucket) -> None:
    from deletion_service.admin.answers import http_answer
    from deletion_service.service import LedgerDeletionService

    w = _world(zk_url, zookeeper, pulsar_broker.service_url, bucket)
    try:
        svc = LedgerDeletionService(w.service.config, w.store, w.service.broker, bookkeeper_store=w.bk_store,
                                    dry_run=True)
        topic = "persistent://t/ns/dry"
        w.writer.bk_ledger(800, pulsar_custom_metadata(topic), ctime_ms=now_ms() - 2 * DAY_MS)
        result = svc.delete_now(decode_payload(raw_request(topicName=topic, ledgerId=800)))
        assert result.outcome == SyncOutcome.WOULD_DELETE
        assert http_answer(result, 600).status == 200
        assert w.bk_exists(800)
        assert svc.metrics.value("pulsar_ledger_deletion_failed_total", {"type": "LEDGER"}) == 0
    finally:
        w.service.close()
        w.service.broker.close()


# ---------------------------------------------------------------- 8, 10, 11. unverifiable offloads


def _offload_request(topic: str, lid: int, ctx: dict) -> PendingDeleteLedgerInfo:
    return request(topic, lid, ledgerType="OFFLOAD_LEDGER", offloadContext=ctx, reason="trim")


def test_unverifiable_offloaded_copies_are_never_deleted(world: World, bucket: S3Bucket,
                                                         pulsar_broker: PulsarLiteBroker) -> None:
    topic, victim = "persistent://t/ns/forger", "persistent://t/ns/victim"
    c = bucket.client
    # 8: data present, index missing
    no_index = f"{java_uuid(1, 1)}-ledger-900"
    c.put_object(Bucket=bucket.name, Key=no_index, Body=b"entries", Metadata=UPSTREAM_META)
    # 11: a valid index that names no managed ledger (older brokers)
    anonymous = [f"{java_uuid(2, 2)}-ledger-901", f"{java_uuid(2, 2)}-ledger-901-index"]
    c.put_object(Bucket=bucket.name, Key=anonymous[0], Body=b"entries", Metadata=UPSTREAM_META)
    c.put_object(Bucket=bucket.name, Key=anonymous[1], Metadata=UPSTREAM_META,
                 Body=build_index_v1(encode_ledger_metadata_format(last_entry_id=9, length=1024)))
    # 10: the victim's streaming segment, asked for by a topic that does not exist
    stamped = bucket.offload_segment(902, 3, 3, victim)  # says whose it is: a mismatch
    unstamped = bucket.offload_segment(903, 4, 4)  # says nothing: unverifiable
    world.writer.managed_ledger(victim, [LedgerInfo(902), LedgerInfo(903), LedgerInfo(904)])
    world.start()
    for lid, ctx in [(900, bucket.offload_context(1, 1)), (901, bucket.offload_context(2, 2)),
                     (902, bucket.offload_context(0, 0, [(3, 3)])), (903, bucket.offload_context(0, 0, [(4, 4)]))]:
        world.service.send_pending_delete(_offload_request(topic, lid, ctx))
    world.drain(lambda wd: len(wd.settled) >= 4)
    assert {no_index, *anonymous, *stamped, *unstamped} <= bucket.keys(), "an unverifiable copy was deleted"
    assert settled_of(world, 902) == ["metadata_mismatch"]
    reasons = sorted(m.properties()[DLQ_REASON] for m in read_dlq(world, pulsar_broker.service_url))
    assert reasons == ["cannot-verify"] * 3


# ---------------------------------------------------------------- 12. errors stay with their request


def test_requests_that_can_never_be_valid_go_to_the_dlq_at_once(world: World, bucket: S3Bucket,
                                                                pulsar_broker: PulsarLiteBroker) -> None:
    topic = "persistent://t/ns/neighbours"
    world.writer.bk_ledger(1000, pulsar_custom_metadata(topic))
    bad_ctx = bucket.offload_context(5, 5)
    bad = [
        b'{"topicName":"persistent://t/ns/a\\ud800","ledgerComponent":"MANAGED_LEDGER","ledgerType":"LEDGER",'
        b'"ledgerId":1,"markedAt":1,"reason":"manual"}',
        raw_request(topicName="persistent://t/ns/.."),
        raw_request(ledgerType="OFFLOAD_LEDGER", offloadContext={
            **bad_ctx, "driverMetadata": {**bad_ctx["driverMetadata"], "serviceEndpoint": "http://a b"}}),
    ]
    world.start()
    for b in bad:
        send_raw(world, b)
    # a region boto3 refuses: valid-looking, so it reaches the offloader, which can never address it
    bad_region = {**bad_ctx, "driverMetadata": {**bad_ctx["driverMetadata"], "region": "us-east-1-"}}
    world.service.send_pending_delete(_offload_request(topic, 1001, bad_region))
    world.service.send_pending_delete(request(topic, 1000))
    world.drain(lambda wd: len(wd.settled) >= 5)
    assert settled_of(world, 1000) == ["deleted"] and not world.bk_exists(1000)
    assert settled_of(world, 1001) == ["dlq"], "retried: an invalid region never becomes valid"
    dlq = read_dlq(world, pulsar_broker.service_url)
    assert sorted(m.properties()[DLQ_REASON] for m in dlq) == ["invalid-request"] * 3 + ["offload-target-error"]
    assert all(m.properties().get(RECONSUMETIMES, "0") == "0" for m in dlq)


# ---------------------------------------------------------------- 13. DELAY_TIME is bounded


def test_a_flood_of_far_future_retries_cannot_starve_a_due_one(world: World) -> None:
    svc = world.service
    topic = "persistent://t/ns/starved"
    world.writer.bk_ledger(1100, pulsar_custom_metadata(topic))
    forged = raw_request(topicName=topic, ledgerId=1101)
    world.start()
    worker = world.worker
    assert worker is not None
    worker.limits.max_not_yet_due = 10
    for _ in range(40):
        send_raw(world, forged, svc.topics.retry, {DELAY_TIME: str(10**15), RECONSUMETIMES: "1"})
    genuine = request(topic, 1100).to_json()
    send_raw(world, genuine, svc.topics.retry, {DELAY_TIME: "0", RECONSUMETIMES: "1"})
    deadline = time.monotonic() + 30
    while settled_of(world, 1100) != ["deleted"]:
        held = worker.in_hand().not_yet_due
        assert time.monotonic() < deadline, f"the due retry starved behind {held} held messages"
        worker.run_once(0.1)
        assert len(worker.intake.not_yet_due) <= 10, "held in memory: the rest are set aside with the broker"
    now = now_ms()
    assert all(d.due_ms <= now + svc.policy.max_delay_s * 1000 for d in worker.intake.not_yet_due)


# ---------------------------------------------------------------- 14. one message's disposal failing


def test_a_ctime_far_in_the_future_parks_nothing_for_a_year_and_strands_no_batch_mate(world: World) -> None:
    topic = "persistent://t/ns/skewed"
    w = world.writer
    w.managed_ledger(topic, [])  # exists, records nothing newer: nothing proves 1200 superseded
    w.bk_ledger(1200, pulsar_custom_metadata(topic), ctime_ms=now_ms() + 400 * 365 * DAY_MS)
    for lid in (1201, 1202):
        w.bk_ledger(lid, pulsar_custom_metadata(topic), ctime_ms=now_ms() - 2 * DAY_MS)
    world.start()
    world.service.send_pending_delete(request(topic, 1200, reason="orphan"))
    for lid in (1201, 1202):
        world.service.send_pending_delete(request(topic, lid))
    world.drain(lambda wd: len(wd.settled) >= 3)
    assert settled_of(world, 1200) == ["reconsumed"] and world.bk_exists(1200)
    assert [settled_of(world, lid) for lid in (1201, 1202)] == [["deleted"], ["deleted"]]
    [skewed] = [s for s in world.settled if s.request is not None and s.request.ledger_id == 1200]
    assert skewed.action.delay_s <= world.service.policy.max_delay_s


# ---------------------------------------------------------------- 5. a publish that keeps failing shows


def test_a_failing_publish_is_bounded_and_shows_in_metrics_and_readiness(world: World) -> None:
    """Fault injection the real broker cannot produce on demand: RETRY/DLQ publishes refused
    (the broker stays up for acks and reads)."""
    from deletion_service.admin.deps import _dispositions_flowing
    from deletion_service.broker.interface import BrokerError
    from deletion_service.delete_phase.consumer import disposer as disposer_mod

    world.start()
    worker = world.worker
    assert worker is not None
    worker.limits.max_awaiting_next_try = 3

    def refuse(*_: object, **__: object) -> str:
        raise BrokerError("publish refused (injected)")

    def refuse_all(copies: list) -> list[BrokerError]:
        return [BrokerError("publish refused (injected)") for _ in copies]

    world.service.publisher.send_dlq = refuse  # type: ignore[method-assign]
    world.service.publisher.send_dead_letters = refuse_all  # type: ignore[method-assign]  # the batched path
    for i in range(6):
        send_raw(world, b"{garbage " + str(i).encode())
    wait_until(lambda: worker.run_once(0.1) >= 0 and worker.in_hand().awaiting_next_try >= 3, 20, "undisposed")
    for _ in range(5):
        worker.run_once(0.05)
    assert worker.in_hand().awaiting_next_try == 3, "the pending list grew past its bound"
    assert world.service.metrics.value("pulsar_ledger_deletion_undisposed") == 3
    assert world.service.metrics.value("pulsar_ledger_deletion_dispose_failures_total") >= 3
    old = disposer_mod.STUCK_AFTER_S
    disposer_mod.STUCK_AFTER_S = 0
    try:
        with pytest.raises(RuntimeError, match="cannot be published"):
            _dispositions_flowing(world.service)
    finally:
        disposer_mod.STUCK_AFTER_S = old
    del world.service.publisher.send_dlq  # the broker takes publishes again: everything drains
    del world.service.publisher.send_dead_letters
    worker.limits.dispose_backoff_s = 0
    for d in worker.disposer.awaiting_next_try:
        d.next_try = 0
    world.drain(lambda wd: len(wd.settled) >= 6, timeout_s=60)
    assert world.service.metrics.value("pulsar_ledger_deletion_undisposed") == 0
