"""Hundreds of requests through a real ZooKeeper, pulsar-lite and moto_server, every table row.

The end state is checked exactly: which znodes and objects are gone, which
remain, how each request ended, and what the DLQ holds.
"""

from __future__ import annotations

import base64
import itertools
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest

from deletion_service.cluster_writer import pulsar_custom_metadata, schema_custom_metadata
from deletion_service.delete_phase.dispose import DLQ_PAYLOAD_BASE64, DLQ_REASON
from metastore import open_store
from metastore.formats import LedgerInfo, Position, schema_id
from tests.deletion_world import DAY_MS, S3Bucket, World, make_world, now_ms, read_dlq, request
from tests.harness import MotoS3Server, PulsarLiteBroker, ZooKeeperServer


@pytest.fixture
def bucket(s3_server: MotoS3Server) -> S3Bucket:
    b = S3Bucket(s3_server.endpoint, f"tiered-{uuid.uuid4().hex[:8]}")
    b.client.create_bucket(Bucket=b.name)
    return b


@pytest.fixture
def world(
    zk_url: str, zookeeper: ZooKeeperServer, pulsar_broker: PulsarLiteBroker, bucket: S3Bucket
) -> Iterator[World]:
    store = open_store(zk_url)
    bk_store = open_store(f"{zookeeper.url}/bk-{uuid.uuid4().hex[:8]}")
    w = make_world(
        store,
        bk_store,
        pulsar_broker.service_url,
        twoPhaseDeletionReconsumeLaterInSeconds=0,
        twoPhaseDeletionMaxRetryDeleteCount=2,
        minLedgerAgeSeconds=3600,
        offloadAllowedBuckets=[bucket.name],
        # the grace window has its own tests (test_safety_findings.py); here "in use" is final at once
        twoPhaseDeletionInUseGraceSeconds=0,
    )
    yield w
    w.service.close()
    w.service.broker.close()
    store.close()
    bk_store.close()


def test_every_row_over_hundreds_of_requests(world: World, bucket: S3Bucket, pulsar_broker: PulsarLiteBroker) -> None:
    w, svc = world.writer, world.service
    ids = itertools.count(1000)
    topics = [f"persistent://tenant-{i % 2}/ns/orders-{i}" for i in range(4)]
    expect_gone: set[int] = set()
    expect_kept: set[int] = set()
    sends = []  # requests to send
    expected = Counter()

    for topic in topics:
        listed = [next(ids) for _ in range(5)]
        cursor_ledger, schema_ledger, compacted = next(ids), next(ids), next(ids)
        for lid in listed:
            w.bk_ledger(lid, pulsar_custom_metadata(topic))
        w.bk_ledger(cursor_ledger, pulsar_custom_metadata(topic, "sub-ledger"))
        w.bk_ledger(schema_ledger, schema_custom_metadata(topic))
        w.bk_ledger(compacted, {"application": "pulsar", "component": "compacted-ledger"})
        w.managed_ledger(topic, [*listed, LedgerInfo(next(ids))])
        w.cursor(topic, "sub-store", Position(listed[0], 3))
        w.cursor(topic, "sub-ledger", Position(listed[0], 3), cursors_ledger_id=cursor_ledger)
        w.cursor(topic, "__compaction", Position(listed[0], 3), properties={"CompactedTopicLedger": compacted})
        w.schema(topic, [schema_ledger])
        expect_kept.update([*listed, cursor_ledger, schema_ledger, compacted])
        # Still referenced: every kind of reference.
        sends += [request(topic, lid) for lid in listed]
        sends += [
            request(topic, cursor_ledger, "MANAGED_CURSOR", cursorName="sub-ledger"),
            request(topic, schema_ledger, "SCHEMA_STORAGE", schemaId=schema_id(topic)),
            request(topic, compacted),
        ]
        expected["still_in_use"] += len(listed) + 3

        # Trimmed data ledgers, unreferenced cursor and schema ledgers: deleted.
        for _ in range(25):
            lid = next(ids)
            w.bk_ledger(lid, pulsar_custom_metadata(topic))
            sends.append(request(topic, lid))
            expect_gone.add(lid)
        for i in range(5):
            lid = next(ids)
            w.bk_ledger(lid, pulsar_custom_metadata(topic, f"old-sub-{i}"))
            sends.append(request(topic, lid, "MANAGED_CURSOR", cursorName=f"old-sub-{i}"))
            expect_gone.add(lid)
        for _ in range(3):
            lid = next(ids)
            w.bk_ledger(lid, schema_custom_metadata(topic))
            sends.append(request(topic, lid, "SCHEMA_STORAGE", schemaId=schema_id(topic)))
            expect_gone.add(lid)
        expected["deleted"] += 33

        # Forged: another topic's ledger, a wrong cursor, a non-Pulsar ledger, a cursor ledger as data.
        other = topics[(topics.index(topic) + 1) % len(topics)]
        forged = [
            (pulsar_custom_metadata(other), {}),
            (pulsar_custom_metadata(topic, "real-sub"), {"cursorName": "other-sub"}),
            ({"application": "hbase"}, {}),
            (pulsar_custom_metadata(topic, "real-sub"), {}),
        ]
        for meta, extra in forged:
            lid = next(ids)
            w.bk_ledger(lid, meta)
            sends.append(request(topic, lid, "MANAGED_CURSOR" if extra else "MANAGED_LEDGER", **extra))
            expect_kept.add(lid)
        expected["metadata_mismatch"] += len(forged)

        # Absent ledgers (already deleted, or never existed).
        sends += [request(topic, next(ids)) for _ in range(5)]
        expected["absent"] += 5

        # OPEN: retried until the budget is spent, then DLQ. Young orphans: wait (held in RETRY).
        for state in ("OPEN", "IN_RECOVERY"):
            lid = next(ids)
            w.bk_ledger(lid, pulsar_custom_metadata(topic), state=state)
            sends.append(request(topic, lid))
            expect_kept.add(lid)
        expected["dlq"] += 2
        lid = next(ids)
        w.bk_ledger(lid, pulsar_custom_metadata(topic), ctime_ms=now_ms() - 60_000)
        sends.append(request(topic, lid, reason="orphan"))
        expect_kept.add(lid)
        lid = next(ids)
        w.bk_ledger(lid, pulsar_custom_metadata(topic), ctime_ms=now_ms() - 2 * DAY_MS)
        sends.append(request(topic, lid, reason="manual"))
        expect_gone.add(lid)
        expected["deleted"] += 1

    # Offloaded copies on the first topic.
    topic = topics[0]
    gone_objects: set[str] = set()
    kept_objects: set[str] = set()
    for i in range(12):
        lid = next(ids)
        gone_objects.update(bucket.offload_ledger(topic, lid, 1000 + i, -i))
        sends.append(
            request(topic, lid, ledgerType="OFFLOAD_LEDGER", offloadContext=bucket.offload_context(1000 + i, -i))
        )
    for i in range(4):
        lid = next(ids)
        gone_objects.update(bucket.offload_segment(lid, 5000 + i, 7, topic))
        sends.append(
            request(
                topic, lid, ledgerType="OFFLOAD_LEDGER", offloadContext=bucket.offload_context(0, 0, [(5000 + i, 7)])
            )
        )
    expected["deleted"] += 16
    # Outside the allow-list: an identical bucket the operator did not allow.
    outside = S3Bucket(bucket.endpoint, f"{bucket.name}-other")
    outside.client.create_bucket(Bucket=outside.name)
    lid = next(ids)
    outside_objects = outside.offload_ledger(topic, lid, 42, 42)
    sends.append(request(topic, lid, ledgerType="OFFLOAD_LEDGER", offloadContext=outside.offload_context(42, 42)))
    # An index that belongs to another topic's ledger.
    lid = next(ids)
    kept_objects.update(bucket.offload_ledger(topic, lid, 43, 43, index_topic=topics[1]))
    sends.append(request(topic, lid, ledgerType="OFFLOAD_LEDGER", offloadContext=bucket.offload_context(43, 43)))
    expected["metadata_mismatch"] += 2
    # Nothing there any more.
    sends.append(request(topic, next(ids), ledgerType="OFFLOAD_LEDGER", offloadContext=bucket.offload_context(44, 44)))
    expected["absent"] += 1

    # Double delivery of already-verified requests: the second finds nothing to delete.
    dupes = [s for s in sends if s.ledger_id in expect_gone][:10]
    sends += dupes

    worker = world.start()
    for r in sends:
        svc.send_pending_delete(r)
    producer = svc.publisher._producer(svc.topics.partition_topics[0])  # noqa: SLF001 - raw bytes on purpose
    garbage = [b"{not json", b"\xff\xfe\x00", b'{"topicName": "persistent://t/ns/x"}']
    for g in garbage:
        producer.send(g)
    expected["dlq"] += len(garbage)

    young = 4
    total_terminal = len(sends) + len(garbage) - young
    world.drain(lambda wd: sum(wd.outcomes().values()) >= total_terminal and worker.held == young)

    outcomes = world.outcomes()
    # Duplicates end "deleted" or "absent" depending on whether they met their twin in one batch.
    dup_deleted = outcomes["deleted"] - expected["deleted"]
    assert 0 <= dup_deleted <= len(dupes)
    assert outcomes["absent"] == expected["absent"] + len(dupes) - dup_deleted
    for key in ("still_in_use", "metadata_mismatch", "dlq"):
        assert outcomes[key] == expected[key], (key, outcomes)
    assert sum(outcomes.values()) == total_terminal

    # Storage: exactly the verified ledgers and objects are gone.
    assert {lid for lid in expect_gone if world.bk_exists(lid)} == set()
    assert {lid for lid in expect_kept if not world.bk_exists(lid)} == set()
    remaining = bucket.keys()
    assert gone_objects.isdisjoint(remaining)
    assert kept_objects <= remaining
    assert set(outside_objects) <= outside.keys()

    # DLQ: the undecodable payloads (with their bytes) and the ledgers that never closed.
    dlq = read_dlq(world, pulsar_broker.service_url)
    reasons = Counter(m.properties()[DLQ_REASON] for m in dlq)
    assert reasons == {"invalid-request": 3, "max-retries-reached": 8}
    payloads = {
        base64.b64decode(m.properties()[DLQ_PAYLOAD_BASE64]) for m in dlq if DLQ_PAYLOAD_BASE64 in m.properties()
    }
    assert payloads == set(garbage)
    assert svc.metrics.value("pulsar_ledger_deletion_max_retry_reached_total") == 8
    assert (
        svc.metrics.value("pulsar_ledger_deletion_acked_total", {"outcome": "still_in_use"}) == expected["still_in_use"]
    )

