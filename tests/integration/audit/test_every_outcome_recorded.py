"""Every outcome of the decision table leaves exactly one audit record, with the evidence it acted on.

Real ZooKeeper (metadata and BookKeeper's znodes in their own chroots), the embedded
broker (pulsar-lite) and an S3 server (moto_server): one request per row of the table,
run through the daemon's worker with the audit writer wired as ``run`` wires it, then
the trail is read back from disk.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deletion_service.audit import trail
from deletion_service.audit.publish import audit_topic
from deletion_service.audit.reader import Query, select
from deletion_service.audit.verify import verify
from deletion_service.audit.writer import AuditWriter, daemon_writer
from deletion_service.cluster_writer import pulsar_custom_metadata
from deletion_service.protocol.request import DeleteLedgerPayload
from deletion_service.service import SyncOutcome
from metastore import open_store
from metastore.formats import LedgerInfo, ledger_path
from tests.support.deletion_world import DAY_MS, S3Bucket, World, make_world, now_ms, request
from tests.support.harness import MotoS3Server, PulsarLiteBroker, ZooKeeperServer

TOPIC = "persistent://audit/ns/orders"
OTHER = "persistent://audit/ns/someone-else"
GARBAGE = b"{not json at all"
IDS = {"deleted": 11, "in_use": 12, "mismatch": 13, "absent": 14, "open": 15, "offload": 16, "sync": 17,
       "young": 180}  # newer than the topic's current ledger (99): nothing proves it superseded


@dataclass
class Trail:
    world: World
    directory: Path
    records: list[dict]
    versions: dict[int, int]  # ledger id → its znode's version before the run
    objects: dict[str, int]  # offloaded key → size, as uploaded

    def of(self, ledger_id: int) -> list[dict]:
        return [r for r in self.records if r["request"] and r["request"]["ledgerId"] == ledger_id]


@pytest.fixture(scope="module")
def bucket(s3_server: MotoS3Server) -> S3Bucket:
    b = S3Bucket(s3_server.endpoint, f"audit-{uuid.uuid4().hex[:8]}")
    b.client.create_bucket(Bucket=b.name)
    return b


@pytest.fixture(scope="module")
def world(zookeeper: ZooKeeperServer, pulsar_broker: PulsarLiteBroker, bucket: S3Bucket,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    store = open_store(f"{zookeeper.url}/audit-{uuid.uuid4().hex[:12]}")
    bk_store = open_store(f"{zookeeper.url}/audit-bk-{uuid.uuid4().hex[:8]}")
    w = make_world(store, bk_store, pulsar_broker.service_url, twoPhaseDeletionReconsumeLaterInSeconds=0,
                   twoPhaseDeletionMaxRetryDeleteCount=1, twoPhaseDeletionInUseGraceSeconds=0,
                   offloadAllowedBuckets=[bucket.name])
    w.service.audit = AuditWriter(trail.audit_dir(tmp_path_factory.mktemp("data")))
    yield w
    w.service.close()
    w.service.broker.close()
    store.close()
    bk_store.close()


def _seed(world: World, bucket: S3Bucket) -> tuple[list, dict[str, int]]:
    w = world.writer
    for key in ("deleted", "in_use", "open", "young"):
        w.bk_ledger(IDS[key], pulsar_custom_metadata(TOPIC), state="OPEN" if key == "open" else "CLOSED")
    w.bk_ledger(IDS["sync"], pulsar_custom_metadata(TOPIC), ctime_ms=now_ms() - 2 * DAY_MS)  # manual: old enough
    w.bk_ledger(IDS["mismatch"], pulsar_custom_metadata(OTHER))
    w.managed_ledger(TOPIC, [IDS["in_use"], LedgerInfo(99)])
    keys = bucket.offload_ledger(TOPIC, IDS["offload"], 7, 8)
    sizes = {k: bucket.client.head_object(Bucket=bucket.name, Key=k)["ContentLength"] for k in keys}
    sends = [request(TOPIC, IDS[k]) for k in ("deleted", "in_use", "mismatch", "absent", "open")]
    sends.append(request(TOPIC, IDS["offload"], ledgerType="OFFLOAD_LEDGER",
                         offloadContext=bucket.offload_context(7, 8)))
    return sends, sizes


@pytest.fixture(scope="module")
def run(world: World, bucket: S3Bucket) -> Trail:
    sends, sizes = _seed(world, bucket)
    versions = {lid: world.bk_store.get(ledger_path("/ledgers", lid, world.writer.layout)).version
                for lid in (IDS["deleted"], IDS["in_use"], IDS["mismatch"], IDS["open"], IDS["sync"])}
    svc = world.service
    world.start()
    for r in sends:
        svc.send_pending_delete(r)
    svc.publisher._producer(svc.topics.partition_topics[0]).send(GARBAGE)  # noqa: SLF001 - raw bytes on purpose
    # deleted, in use, mismatch, absent, open → dlq (after one reconsume), offload deleted, garbage → dlq
    world.drain(lambda wd: sum(wd.outcomes().values()) >= len(sends) + 1)
    # the admin API: "not yet" (a young ledger, manual) settles nothing; a delete does
    assert svc.delete_ledger(_payload(IDS["young"])).outcome == SyncOutcome.NOT_YET
    assert svc.delete_ledger(_payload(IDS["sync"])).outcome == SyncOutcome.DELETED
    assert svc.audit is not None
    records = select(svc.audit.directory, Query()).records
    return Trail(world, svc.audit.directory, records, versions, sizes)


def _payload(ledger_id: int) -> DeleteLedgerPayload:
    return DeleteLedgerPayload.model_validate(
        {"topicName": TOPIC, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER", "ledgerId": ledger_id})


def test_one_record_per_settled_message_and_the_chain_is_whole(run: Trail) -> None:
    # every Settled the worker reported, plus the admin API's synchronous delete
    assert len(run.records) == len(run.world.settled) + 1
    assert [r["seq"] for r in run.records] == list(range(1, len(run.records) + 1))
    assert run.records[0]["prev"] == ""
    verdict = verify(run.directory)
    assert verdict.whole and verdict.records == len(run.records), verdict.broken
    assert Counter(r["outcome"] for r in run.records) == Counter(
        [s.outcome.value for s in run.world.settled] + ["deleted"])
    assert len({r["daemon"] for r in run.records}) == 1


def test_deleted_bookkeeper_ledger(run: Trail) -> None:
    [rec] = run.of(IDS["deleted"])
    assert rec["outcome"] == "deleted"
    assert rec["request"]["topicName"] == TOPIC and rec["request"]["reason"] == "trim"
    assert rec["evidence"] == {"bkVersion": run.versions[IDS["deleted"]],
                               "customMetadata": pulsar_custom_metadata(TOPIC), "references": [],
                               "offloadObjects": []}
    assert not run.world.bk_exists(IDS["deleted"])


def test_deleted_offloaded_copy_lists_each_object_with_its_size(run: Trail) -> None:
    [rec] = run.of(IDS["offload"])
    assert rec["outcome"] == "deleted"
    assert rec["request"]["ledgerType"] == "OFFLOAD_LEDGER"
    got = {o["key"]: o["size"] for o in rec["evidence"]["offloadObjects"]}
    assert got == run.objects and all(size > 0 for size in got.values())
    assert rec["evidence"]["bkVersion"] is None


def test_absent(run: Trail) -> None:
    [rec] = run.of(IDS["absent"])
    assert rec["outcome"] == "absent" and "already absent" in rec["reason"]
    assert rec["evidence"] == {"bkVersion": None, "customMetadata": {}, "references": [], "offloadObjects": []}


def test_still_in_use_names_the_reference(run: Trail) -> None:
    [rec] = run.of(IDS["in_use"])
    assert rec["outcome"] == "still_in_use"
    assert rec["evidence"]["references"] == [f"listed in the managed ledger of {TOPIC}"]
    assert rec["evidence"]["bkVersion"] == run.versions[IDS["in_use"]]
    assert run.world.bk_exists(IDS["in_use"])


def test_metadata_mismatch_keeps_what_the_znode_said(run: Trail) -> None:
    [rec] = run.of(IDS["mismatch"])
    assert rec["outcome"] == "metadata_mismatch"
    assert rec["evidence"]["customMetadata"] == pulsar_custom_metadata(OTHER)
    assert rec["evidence"]["bkVersion"] == run.versions[IDS["mismatch"]]
    assert rec["evidence"]["offloadObjects"] == []
    assert run.world.bk_exists(IDS["mismatch"])


def test_reconsumed_then_dead_lettered(run: Trail) -> None:
    recs = run.of(IDS["open"])
    assert [r["outcome"] for r in recs] == ["reconsumed", "dlq"]  # the budget is one retry
    assert "OPEN" in recs[0]["reason"] and "max retries" in recs[1]["reason"]
    assert all(r["evidence"]["bkVersion"] == run.versions[IDS["open"]] for r in recs)


def test_undecodable_message_is_recorded_with_its_digest(run: Trail) -> None:
    [rec] = [r for r in run.records if r["request"] is None]
    assert rec["outcome"] == "dlq" and rec["reason"].startswith("invalid request")
    assert hashlib.sha256(GARBAGE).hexdigest() in rec["reason"]
    assert rec["evidence"] == {"bkVersion": None, "customMetadata": {}, "references": [], "offloadObjects": []}


def test_admin_api_delete_is_recorded(run: Trail) -> None:
    [rec] = run.of(IDS["sync"])
    assert rec["outcome"] == "deleted" and rec["request"]["reason"] == "manual"
    assert rec["evidence"]["bkVersion"] == run.versions[IDS["sync"]]
    assert rec == run.records[-1]
    assert run.of(IDS["young"]) == []  # "not yet": the caller asks again; nothing was settled


def test_lines_on_disk_are_the_contract_format(run: Trail) -> None:
    lines = [line for _, p in trail.files(run.directory) for line in p.read_text().splitlines()]
    first = json.loads(lines[0])
    assert list(first) == ["seq", "at", "daemon", "request", "outcome", "reason", "evidence", "prev"]
    assert list(first["evidence"]) == ["bkVersion", "customMetadata", "references", "offloadObjects"]
    for before, after in zip(lines, lines[1:], strict=False):
        assert json.loads(after)["prev"] == hashlib.sha256(before.encode()).hexdigest()


def test_records_are_copied_to_the_audit_topic(zookeeper: ZooKeeperServer, pulsar_broker: PulsarLiteBroker,
                                               tmp_path: Path) -> None:
    """ledgerDeletionAuditTopicEnabled: each line also goes to <topic>-AUDIT, byte for byte, in order."""
    store = open_store(f"{zookeeper.url}/audit-copy-{uuid.uuid4().hex[:8]}")
    w = make_world(store, store, pulsar_broker.service_url, ledgerDeletionAuditTopicEnabled=True)
    w.service.audit = daemon_writer(w.service.config, tmp_path, w.service.broker)
    try:
        for lid in (1, 2, 3):
            w.writer.bk_ledger(lid, pulsar_custom_metadata(TOPIC))
        w.start()
        for lid in (1, 2, 3, 4):
            w.service.send_pending_delete(request(TOPIC, lid))
        w.drain(lambda wd: sum(wd.outcomes().values()) >= 4)
        w.service.audit.close()  # sends what is queued
        written = [line for _, p in trail.files(tmp_path / "audit") for line in p.read_text().splitlines()]
        assert len(written) == 4
        copied = [m.data for m in w.service.broker.read_all(audit_topic(w.service.config.ledger_deletion_topic))]
        assert [c.decode() for c in copied] == written
    finally:
        w.service.close()
        w.service.broker.close()
        store.close()
