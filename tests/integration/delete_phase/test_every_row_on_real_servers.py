"""Hundreds of requests through a real ZooKeeper, pulsar-lite and moto_server, every table row.

The end state is checked exactly: which znodes and objects are gone, which
remain, how each request ended, and what the DLQ holds.

One run serves every test here: the requests of all rows go through one
daemon together (that mix is part of what is tested), once per module.  Each
row is then its own test, so a broken row fails by name instead of as one
assertion about totals; ``test_the_run_as_a_whole`` checks what no single row
owns (nothing else ended, nothing else parked, the metrics).
"""

from __future__ import annotations

import base64
import itertools
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from deletion_service.cluster_writer import pulsar_custom_metadata, schema_custom_metadata
from deletion_service.delete_phase.consumer.copies import DLQ_PAYLOAD_BASE64, DLQ_REASON
from deletion_service.protocol.request import InvalidRequest, PendingDeleteLedgerInfo, decode
from metastore import open_store
from metastore.formats import LedgerInfo, Position, schema_id
from tests.support.deletion_world import DAY_MS, S3Bucket, World, make_world, now_ms, read_dlq, request
from tests.support.harness import MotoS3Server, PulsarLiteBroker, ZooKeeperServer

GARBAGE = [b"{not json", b"\xff\xfe\x00", b'{"topicName": "persistent://t/ns/x"}']
DUPLICATED = 10  # verified requests delivered a second time, after everything else
CURRENT_LEDGER = 10**9  # each topic's current ledger: newer than any other ledger of the run

#: Every row of the run, in the order its requests are sent, and how each of its requests ends (None: it
#: does not end yet, held in RETRY).  Each row is one test below.
ROWS: dict[str, str | None] = {
    "in-use: managed-ledger list": "still_in_use",
    "in-use: cursor ledger": "still_in_use",
    "in-use: schema ledger": "still_in_use",
    "in-use: compacted ledger": "still_in_use",
    "deleted: trimmed data ledger": "deleted",
    "deleted: unreferenced cursor ledger": "deleted",
    "deleted: unreferenced schema ledger": "deleted",
    "mismatch: another topic's ledger": "metadata_mismatch",
    "mismatch: another cursor's ledger": "metadata_mismatch",
    "mismatch: not a Pulsar ledger": "metadata_mismatch",
    "mismatch: cursor ledger sent as data": "metadata_mismatch",
    "absent: never existed": "absent",
    "dlq: OPEN until the budget is spent": "dlq",
    "dlq: IN_RECOVERY until the budget is spent": "dlq",
    "held: young orphan": None,
    "deleted: old ledger, manual request": "deleted",
    "deleted: offloaded ledger": "deleted",
    "deleted: offloaded segment": "deleted",
    "mismatch: bucket outside the allow-list": "metadata_mismatch",
    "mismatch: offload index of another topic": "metadata_mismatch",
    "absent: offload already gone": "absent",
    "duplicate: second delivery of a verified request": "deleted",  # or "absent": see test_row
}
#: The rows whose requests end in the DLQ, and the reason each entry carries.
DLQ_REASONS = {
    "dlq: OPEN until the budget is spent": "max-retries-reached",
    "dlq: IN_RECOVERY until the budget is spent": "max-retries-reached",
}


@dataclass
class Row:
    """One table row: its requests' ledger ids, how each must end, and what storage must hold afterwards."""

    outcome: str | None  # the one terminal outcome of each request; None: not terminal yet (held in RETRY)
    requests: list[int] = field(default_factory=list)
    gone: set[int] = field(default_factory=set)  # BookKeeper znodes deleted
    kept: set[int] = field(default_factory=set)  # BookKeeper znodes left alone
    gone_objects: set[tuple[str, str]] = field(default_factory=set)  # (bucket, key)
    kept_objects: set[tuple[str, str]] = field(default_factory=set)
    dlq_reason: str | None = None  # each request's DLQ entry, when the row ends there

    def add(self, lid: int, *, gone: bool | None) -> int:
        """A request for ``lid``; ``gone`` says what becomes of its znode (None: it has none)."""
        self.requests.append(lid)
        if gone is not None:
            (self.gone if gone else self.kept).add(lid)
        return lid


@dataclass
class Run:
    """What one daemon run left behind, read once for every row's test."""

    world: World
    rows: dict[str, Row]
    terminal: dict[int, list[str]]  # ledger id → terminal outcomes, in settling order
    undecodable: list[str]  # terminal outcomes of messages that were not requests
    dlq_reasons: dict[int, list[str]]  # ledger id → DLQ reasons
    dlq_undecodable: list[tuple[str, bytes | None]]  # (reason, payloadBase64 decoded) of the rest
    objects: set[tuple[str, str]]
    total_terminal: int
    young: int
    held: int
    drain_error: str | None  # set when the run did not reach its end in time


@pytest.fixture(scope="module")
def bucket(s3_server: MotoS3Server) -> S3Bucket:
    b = S3Bucket(s3_server.endpoint, f"tiered-{uuid.uuid4().hex[:8]}")
    b.client.create_bucket(Bucket=b.name)
    return b


@pytest.fixture(scope="module")
def world(zookeeper: ZooKeeperServer, pulsar_broker: PulsarLiteBroker, bucket: S3Bucket) -> Iterator[World]:
    store = open_store(f"{zookeeper.url}/t-{uuid.uuid4().hex[:12]}")  # zk_url's fresh chroot, for the module
    bk_store = open_store(f"{zookeeper.url}/bk-{uuid.uuid4().hex[:8]}")
    w = make_world(
        store,
        bk_store,
        pulsar_broker.service_url,
        twoPhaseDeletionReconsumeLaterInSeconds=0,
        twoPhaseDeletionMaxRetryDeleteCount=2,
        minLedgerAgeSeconds=3600,
        offloadAllowedBuckets=[bucket.name],
        # the grace window has its own tests (test_forged_racing_and_poison_requests.py); here "in use" is final at once
        twoPhaseDeletionInUseGraceSeconds=0,
    )
    yield w
    w.service.close()
    w.service.broker.close()
    store.close()
    bk_store.close()


def _topic_rows(
    world: World, rows: dict[str, Row], topics: list[str], topic: str, ids: Iterator[int]
) -> list[PendingDeleteLedgerInfo]:
    """One topic's ledgers and requests, for every BookKeeper row; returns the requests in send order."""
    w, sends = world.writer, []
    listed = [next(ids) for _ in range(5)]
    cursor_ledger, schema_ledger, compacted = next(ids), next(ids), next(ids)
    for lid in listed:
        w.bk_ledger(lid, pulsar_custom_metadata(topic))
    w.bk_ledger(cursor_ledger, pulsar_custom_metadata(topic, "sub-ledger"))
    w.bk_ledger(schema_ledger, schema_custom_metadata(topic))
    w.bk_ledger(compacted, {"application": "pulsar", "component": "compacted-ledger"})
    # its current ledger, newer than every ledger below: what proves a young trimmed ledger superseded
    w.managed_ledger(topic, [*listed, LedgerInfo(CURRENT_LEDGER + topics.index(topic))])
    w.cursor(topic, "sub-store", Position(listed[0], 3))
    w.cursor(topic, "sub-ledger", Position(listed[0], 3), cursors_ledger_id=cursor_ledger)
    w.cursor(topic, "__compaction", Position(listed[0], 3), properties={"CompactedTopicLedger": compacted})
    w.schema(topic, [schema_ledger])
    # Still referenced: every kind of reference.
    sends += [request(topic, rows["in-use: managed-ledger list"].add(lid, gone=False)) for lid in listed]
    sends += [
        request(topic, rows["in-use: cursor ledger"].add(cursor_ledger, gone=False), "MANAGED_CURSOR",
                cursorName="sub-ledger"),
        request(topic, rows["in-use: schema ledger"].add(schema_ledger, gone=False), "SCHEMA_STORAGE",
                schemaId=schema_id(topic)),
        request(topic, rows["in-use: compacted ledger"].add(compacted, gone=False)),
    ]

    # Trimmed data ledgers, unreferenced cursor and schema ledgers: deleted.
    for _ in range(25):
        lid = rows["deleted: trimmed data ledger"].add(next(ids), gone=True)
        w.bk_ledger(lid, pulsar_custom_metadata(topic))
        sends.append(request(topic, lid))
    for i in range(5):
        lid = rows["deleted: unreferenced cursor ledger"].add(next(ids), gone=True)
        # a gone cursor proves nothing about a young cursor ledger (created before its cursor): old ones
        w.bk_ledger(lid, pulsar_custom_metadata(topic, f"old-sub-{i}"), ctime_ms=now_ms() - 2 * DAY_MS)
        sends.append(request(topic, lid, "MANAGED_CURSOR", cursorName=f"old-sub-{i}"))
    for _ in range(3):
        lid = rows["deleted: unreferenced schema ledger"].add(next(ids), gone=True)
        w.bk_ledger(lid, schema_custom_metadata(topic), ctime_ms=now_ms() - 2 * DAY_MS)
        sends.append(request(topic, lid, "SCHEMA_STORAGE", schemaId=schema_id(topic)))

    # Forged: another topic's ledger, a wrong cursor, a non-Pulsar ledger, a cursor ledger as data.
    other = topics[(topics.index(topic) + 1) % len(topics)]
    forged = [
        ("mismatch: another topic's ledger", pulsar_custom_metadata(other), {}),
        ("mismatch: another cursor's ledger", pulsar_custom_metadata(topic, "real-sub"), {"cursorName": "other-sub"}),
        ("mismatch: not a Pulsar ledger", {"application": "hbase"}, {}),
        ("mismatch: cursor ledger sent as data", pulsar_custom_metadata(topic, "real-sub"), {}),
    ]
    for row, meta, extra in forged:
        lid = rows[row].add(next(ids), gone=False)
        w.bk_ledger(lid, meta)
        sends.append(request(topic, lid, "MANAGED_CURSOR" if extra else "MANAGED_LEDGER", **extra))

    # Absent ledgers (already deleted, or never existed).
    sends += [request(topic, rows["absent: never existed"].add(next(ids), gone=None)) for _ in range(5)]

    # OPEN: retried until the budget is spent, then DLQ. Young orphans: wait (held in RETRY).
    for state in ("OPEN", "IN_RECOVERY"):
        lid = rows[f"dlq: {state} until the budget is spent"].add(next(ids), gone=False)
        w.bk_ledger(lid, pulsar_custom_metadata(topic), state=state)
        sends.append(request(topic, lid))
    # newer than the topic's current ledger, as a ledger being rolled over to is: nothing proves it
    # superseded, so it waits out the age guard whatever its request's reason says
    lid = rows["held: young orphan"].add(CURRENT_LEDGER + 1000 + topics.index(topic), gone=False)
    w.bk_ledger(lid, pulsar_custom_metadata(topic), ctime_ms=now_ms() - 60_000)
    sends.append(request(topic, lid, reason="orphan"))
    lid = rows["deleted: old ledger, manual request"].add(next(ids), gone=True)
    w.bk_ledger(lid, pulsar_custom_metadata(topic), ctime_ms=now_ms() - 2 * DAY_MS)
    sends.append(request(topic, lid, reason="manual"))
    return sends


def _offload_rows(
    rows: dict[str, Row], bucket: S3Bucket, topics: list[str], ids: Iterator[int]
) -> list[PendingDeleteLedgerInfo]:
    """Offloaded copies on the first topic: deleted, outside the allow-list, another's index, gone."""
    topic, sends = topics[0], []
    for i in range(12):
        lid = rows["deleted: offloaded ledger"].add(next(ids), gone=None)
        rows["deleted: offloaded ledger"].gone_objects.update(
            (bucket.name, k) for k in bucket.offload_ledger(topic, lid, 1000 + i, -i))
        sends.append(
            request(topic, lid, ledgerType="OFFLOAD_LEDGER", offloadContext=bucket.offload_context(1000 + i, -i))
        )
    for i in range(4):
        lid = rows["deleted: offloaded segment"].add(next(ids), gone=None)
        rows["deleted: offloaded segment"].gone_objects.update(
            (bucket.name, k) for k in bucket.offload_segment(lid, 5000 + i, 7, topic))
        sends.append(
            request(
                topic, lid, ledgerType="OFFLOAD_LEDGER", offloadContext=bucket.offload_context(0, 0, [(5000 + i, 7)])
            )
        )
    # Outside the allow-list: an identical bucket the operator did not allow.
    outside = S3Bucket(bucket.endpoint, f"{bucket.name}-other")
    outside.client.create_bucket(Bucket=outside.name)
    lid = rows["mismatch: bucket outside the allow-list"].add(next(ids), gone=None)
    rows["mismatch: bucket outside the allow-list"].kept_objects.update(
        (outside.name, k) for k in outside.offload_ledger(topic, lid, 42, 42))
    sends.append(request(topic, lid, ledgerType="OFFLOAD_LEDGER", offloadContext=outside.offload_context(42, 42)))
    # An index that belongs to another topic's ledger.
    lid = rows["mismatch: offload index of another topic"].add(next(ids), gone=None)
    rows["mismatch: offload index of another topic"].kept_objects.update(
        (bucket.name, k) for k in bucket.offload_ledger(topic, lid, 43, 43, index_topic=topics[1]))
    sends.append(request(topic, lid, ledgerType="OFFLOAD_LEDGER", offloadContext=bucket.offload_context(43, 43)))
    # Nothing there any more.
    lid = rows["absent: offload already gone"].add(next(ids), gone=None)
    sends.append(request(topic, lid, ledgerType="OFFLOAD_LEDGER", offloadContext=bucket.offload_context(44, 44)))
    return sends


def _build(world: World, bucket: S3Bucket) -> tuple[dict[str, Row], list[PendingDeleteLedgerInfo]]:
    """Every row's cluster state and requests; the requests in the order they are sent."""
    rows = {name: Row(outcome, dlq_reason=DLQ_REASONS.get(name)) for name, outcome in ROWS.items()}
    ids = itertools.count(1000)
    topics = [f"persistent://tenant-{i % 2}/ns/orders-{i}" for i in range(4)]
    sends: list[PendingDeleteLedgerInfo] = []
    for topic in topics:
        sends += _topic_rows(world, rows, topics, topic, ids)
    sends += _offload_rows(rows, bucket, topics, ids)

    # Double delivery of already-verified requests: the second finds nothing to delete.  They are the first
    # trimmed data ledgers, whose first copies went out long before; they move to their own row.
    trimmed, dup = rows["deleted: trimmed data ledger"], rows["duplicate: second delivery of a verified request"]
    for lid in trimmed.requests[:DUPLICATED]:
        trimmed.requests.remove(lid)
        trimmed.gone.discard(lid)
        dup.add(lid, gone=True)
    sends += [s for s in sends if s.ledger_id in set(dup.requests)]
    return rows, sends


def _objects(bucket: S3Bucket) -> set[tuple[str, str]]:
    keys = bucket.keys()  # a listing, not a dict's keys (ruff's SIM118 mistakes it for one inline)
    return {(bucket.name, k) for k in keys}


@pytest.fixture(scope="module")
def run(world: World, bucket: S3Bucket, pulsar_broker: PulsarLiteBroker) -> Run:
    """Send every row's requests and the undecodable payloads, run the daemon to its end, read the state."""
    rows, sends = _build(world, bucket)
    svc = world.service
    worker = world.start()
    for r in sends:
        svc.send_pending_delete(r)
    producer = svc.publisher._producer(svc.topics.partition_topics[0])  # noqa: SLF001 - raw bytes on purpose
    for g in GARBAGE:
        producer.send(g)

    young = len(rows["held: young orphan"].requests)
    total_terminal = len(sends) + len(GARBAGE) - young
    drain_error = None
    try:
        world.drain(lambda wd: sum(wd.outcomes().values()) >= total_terminal and worker.in_hand().not_yet_due == young)
    except AssertionError as e:  # every row's test then says what its own requests did
        drain_error = str(e)

    terminal: dict[int, list[str]] = defaultdict(list)
    undecodable: list[str] = []
    for s in world.settled:
        if s.outcome.value != "reconsumed":
            (terminal[s.request.ledger_id] if s.request is not None else undecodable).append(s.outcome.value)
    dlq_reasons: dict[int, list[str]] = defaultdict(list)
    dlq_undecodable: list[tuple[str, bytes | None]] = []
    for m in read_dlq(world, pulsar_broker.service_url):
        props = m.properties()
        try:
            dlq_reasons[decode(m.data()).ledger_id].append(props[DLQ_REASON])
        except InvalidRequest:
            raw = props.get(DLQ_PAYLOAD_BASE64)
            dlq_undecodable.append((props[DLQ_REASON], base64.b64decode(raw) if raw is not None else None))
    buckets = {b for row in rows.values() for b, _ in row.gone_objects | row.kept_objects}
    objects = {obj for b in sorted(buckets) for obj in _objects(S3Bucket(bucket.endpoint, b))}
    return Run(world, rows, dict(terminal), undecodable, dict(dlq_reasons), dlq_undecodable, objects,
               total_terminal, young, worker.in_hand().not_yet_due, drain_error)


@pytest.mark.parametrize("name", list(ROWS))
def test_row(run: Run, name: str) -> None:
    row = run.rows[name]
    assert row.requests, "the row sent no request"
    ended = {lid: run.terminal.get(lid, []) for lid in row.requests}
    if name.startswith("duplicate:"):
        # Each copy ends "deleted" or "absent", depending on whether it met its twin in one batch; one deleted it.
        bad = {lid: outs for lid, outs in ended.items()
               if len(outs) != 2 or not set(outs) <= {"deleted", "absent"} or "deleted" not in outs}
        assert bad == {}, run.drain_error
    else:
        want = [row.outcome] if row.outcome is not None else []
        assert {lid: outs for lid, outs in ended.items() if outs != want} == {}, (want, run.drain_error)
    assert {lid for lid in row.gone if run.world.bk_exists(lid)} == set(), "znodes left that should be gone"
    assert {lid for lid in row.kept if not run.world.bk_exists(lid)} == set(), "znodes deleted that must stay"
    assert row.gone_objects.isdisjoint(run.objects), "objects left that should be gone"
    assert row.kept_objects <= run.objects, "objects deleted that must stay"
    parked = {lid: run.dlq_reasons[lid] for lid in row.requests if lid in run.dlq_reasons}
    assert parked == ({lid: [row.dlq_reason] for lid in row.requests} if row.dlq_reason else {})


def test_row_undecodable_payloads_park_with_their_bytes(run: Run) -> None:
    assert run.undecodable == ["dlq"] * len(GARBAGE), run.drain_error
    assert sorted(run.dlq_undecodable, key=repr) == sorted([("invalid-request", g) for g in GARBAGE], key=repr)


def test_the_run_as_a_whole(run: Run) -> None:
    """What no row owns: the run ended, nothing else ended or parked, and the metrics agree with the rows."""
    assert run.drain_error is None
    assert run.held == run.young
    assert sum(len(outs) for outs in run.terminal.values()) + len(run.undecodable) == run.total_terminal
    sent = {lid for row in run.rows.values() for lid in row.requests}
    assert set(run.terminal) <= sent and set(run.dlq_reasons) <= sent
    parked = Counter(reason for reasons in run.dlq_reasons.values() for reason in reasons)
    parked.update(reason for reason, _ in run.dlq_undecodable)
    max_retries = sum(len(run.rows[name].requests) for name in DLQ_REASONS)  # 8: two rows, four topics
    assert parked == {"invalid-request": len(GARBAGE), "max-retries-reached": max_retries}
    metrics = run.world.service.metrics
    assert metrics.value("pulsar_ledger_deletion_max_retry_reached_total") == max_retries
    in_use = sum(len(row.requests) for name, row in run.rows.items() if name.startswith("in-use:"))
    assert metrics.value("pulsar_ledger_deletion_acked_total", {"outcome": "still_in_use"}) == in_use
