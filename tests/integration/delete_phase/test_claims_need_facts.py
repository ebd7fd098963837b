"""A request's claims buy nothing the facts don't prove.

Real ZooKeeper (metadata and BookKeeper's ledgers in their own chroots), the
pulsar-lite broker, moto_server; the delete phase runs in-process against them.
Each test checks one way trusting a claim goes wrong:

1. a forged ``reason: trim`` must not delete a young ledger whose reference is not yet written;
7. objects of a failed earlier offload (a uuid no context names) must not be acked "in use"
   forever because the ledger is listed;
9. a trim whose sends outlast the grace, or whose clock runs behind the daemon's, must not
   remove ledgers whose requests the daemon already acked "in use".
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence

import pytest

from deletion_service.broker.interface import BrokerError
from deletion_service.cluster_writer import (
    bucket_custom_metadata,
    compacted_custom_metadata,
    pulsar_custom_metadata,
    schema_custom_metadata,
)
from deletion_service.cursor.ack_budget import PersistBudget
from deletion_service.cursor.reset import reset_stored_cursor
from deletion_service.mark_phase.trim import trim
from deletion_service.protocol.request import PendingDeleteLedgerInfo
from metastore import open_store
from metastore.formats import (
    LedgerInfo,
    OffloadContext,
    Position,
    decode_cursor,
    decode_managed_ledger,
    managed_ledger_path,
    schema_id,
)
from offloaders.interface import java_uuid
from tests.support.deletion_world import DAY_MS, S3Bucket, World, make_world, now_ms, request
from tests.support.harness import MotoS3Server, PulsarLiteBroker, ZooKeeperServer

GRACE_S = 3


@pytest.fixture
def bucket(s3_server: MotoS3Server) -> S3Bucket:
    b = S3Bucket(s3_server.endpoint, f"claims-{uuid.uuid4().hex[:8]}")
    b.client.create_bucket(Bucket=b.name)
    return b


@pytest.fixture
def world(zk_url: str, zookeeper: ZooKeeperServer, pulsar_broker: PulsarLiteBroker,
          bucket: S3Bucket) -> Iterator[World]:
    store = open_store(zk_url)
    bk_store = open_store(f"{zookeeper.url}/bk-{uuid.uuid4().hex[:8]}")
    w = make_world(store, bk_store, pulsar_broker.service_url, twoPhaseDeletionReconsumeLaterInSeconds=1,
                   twoPhaseDeletionMaxRetryDeleteCount=5, minLedgerAgeSeconds=3600,
                   offloadAllowedBuckets=[bucket.name], twoPhaseDeletionInUseGraceSeconds=GRACE_S)
    yield w
    w.service.close()
    w.service.broker.close()
    store.close()
    bk_store.close()


def _ends(world: World, ledger_id: int) -> list[str]:
    return [s.outcome.value for s in world.settled if s.request is not None and s.request.ledger_id == ledger_id]


def _settled(*ids: int) -> object:
    return lambda w: all(_ends(w, i) for i in ids)


# ---------------------------------------------------------------- 1. reason skips the age guard


@pytest.mark.parametrize("reason", ["trim", "topic-deleted"])
def test_a_forged_reason_cannot_delete_a_ledger_whose_reference_is_not_written_yet(world: World, reason: str) -> None:
    """Schema ledger 12 was just closed by the schema registry, which has not yet added it to the
    locator (which records 10); data ledger 22 was just rolled over to, its managed ledger not yet
    rewritten (it lists 20, 21).  A request claiming Pulsar's own reasons must not delete either."""
    topic = f"persistent://t/ns/forged-{reason}"
    w = world.writer
    w.bk_ledger(10, schema_custom_metadata(topic), ctime_ms=now_ms() - 2 * DAY_MS)
    w.schema(topic, [10])
    w.bk_ledger(12, schema_custom_metadata(topic))  # young: created a moment ago
    w.bk_ledger(20, pulsar_custom_metadata(topic), ctime_ms=now_ms() - 2 * DAY_MS)
    w.bk_ledger(21, pulsar_custom_metadata(topic))
    w.managed_ledger(topic, [20, 21])
    w.bk_ledger(22, pulsar_custom_metadata(topic))  # young, newer than everything listed
    w.bk_ledger(19, pulsar_custom_metadata(topic))  # young, but older than listed 21: trimmed, provably
    world.start()
    for lid, extra in ((12, {"ledgerComponent": "SCHEMA_STORAGE", "schemaId": schema_id(topic)}), (22, {}), (19, {})):
        world.service.send_pending_delete(request(topic, lid, reason=reason, **extra))
    world.drain(_settled(12, 22, 19))
    assert world.bk_exists(12) and world.bk_exists(22), "a young ledger nothing proves superseded was deleted"
    assert _ends(world, 12) == ["reconsumed"] and _ends(world, 22) == ["reconsumed"]
    young = [s for s in world.settled if s.request is not None and s.request.ledger_id in (12, 22)]
    assert all("younger than minLedgerAgeSeconds" in s.action.reason for s in young)
    # A genuinely trimmed young ledger still goes at once: its managed ledger lists a newer one.
    assert _ends(world, 19) == ["deleted"] and not world.bk_exists(19)


# ---------------------------------------------------------------- 7. stale-uuid offload objects


def test_objects_of_a_replaced_offload_are_deleted_and_the_live_copy_is_kept(world: World, bucket: S3Bucket) -> None:
    """Ledger 31 is listed; its context names uuid (7, 7).  Objects under (6, 6) are the leftovers of
    a failed earlier offload: nothing names them, so a request for them deletes them; a request
    for the live uuid is acked in use."""
    topic = "persistent://t/ns/stale-offload"
    w = world.writer
    ctx = bucket.offload_context(7, 7)
    w.managed_ledger(topic, [LedgerInfo(30), LedgerInfo(31, offload_context=OffloadContext(
        uid_msb=7, uid_lsb=7, complete=True, driver_name="aws-s3", driver_metadata=ctx["driverMetadata"])),
        LedgerInfo(32)])
    live = set(bucket.offload_ledger(topic, 31, 7, 7))
    stale = set(bucket.offload_ledger(topic, 31, 6, 6))
    world.start()
    world.service.send_pending_delete(request(topic, 31, ledgerType="OFFLOAD_LEDGER",
                                              offloadContext=bucket.offload_context(6, 6)))
    world.drain(_settled(31))
    assert _ends(world, 31) == ["deleted"], world.settled[-1].action.reason
    assert bucket.keys() & (live | stale) == live
    world.settled.clear()
    world.service.send_pending_delete(request(topic, 31, ledgerType="OFFLOAD_LEDGER", reason="manual",
                                              offloadContext=ctx))
    world.drain(_settled(31))
    assert _ends(world, 31) == ["still_in_use"] and live <= bucket.keys()
    assert java_uuid(7, 7) in world.settled[-1].action.reason


# ---------------------------------------------------------------- 9. a trim slower than the grace


def _ml_ids(world: World, topic: str) -> list[int]:
    node = world.store.get(managed_ledger_path(topic))
    assert node is not None
    return decode_managed_ledger(node.data).ledger_ids()


def _trim_topic(world: World, topic: str) -> None:
    w = world.writer
    for lid in (40, 41, 42):
        w.bk_ledger(lid, pulsar_custom_metadata(topic))
    w.managed_ledger(topic, [40, 41, 42])
    w.cursor(topic, "sub", Position(42, 0))  # 40 and 41 wholly consumed


def _orphans(world: World, topic: str) -> list[int]:
    """Ledgers in BookKeeper that the list forgot and no request will delete (the daemon is idle)."""
    listed = set(_ml_ids(world, topic))
    return [lid for lid in (40, 41) if lid not in listed and world.bk_exists(lid)]


def _sender_that_waits_for_the_daemon(world: World, extra_wait_s: float = 0.0):  # noqa: ANN202
    """Sends through the real broker, then lets the daemon see the requests before trim writes:
    the daemon consumes them while they are still listed (the race the grace is for).
    ``extra_wait_s`` is the slow broker: receipts that arrive that much later (a fault the real
    broker cannot produce on demand, injected by holding the receipts back)."""
    def send(requests: Sequence[PendingDeleteLedgerInfo]) -> list[str | BrokerError]:
        answers = world.service.publisher.send_requests(requests)
        deadline = time.monotonic() + 30
        while not all(_ends(world, r.ledger_id) for r in requests):
            assert time.monotonic() < deadline, "the daemon never saw the trim's requests"
            world.worker.run_once(0.2)  # type: ignore[union-attr]
        stop = time.monotonic() + extra_wait_s
        while time.monotonic() < stop:
            world.worker.run_once(0.2)  # type: ignore[union-attr]
        return answers
    return send


def test_a_trim_slower_than_the_grace_removes_nothing(world: World) -> None:
    topic = "persistent://t/ns/slow-trim"
    _trim_topic(world, topic)
    world.start()
    result = trim(world.store, topic, _sender_that_waits_for_the_daemon(world, extra_wait_s=GRACE_S + 1),
                  offline=True, write_within_s=GRACE_S)
    assert result.aborted is not None and "in-use grace" in result.aborted and result.removed == []
    world.drain(lambda w: all("still_in_use" in _ends(w, lid) for lid in (40, 41)), timeout_s=60)
    assert _ml_ids(world, topic) == [40, 41, 42] and _orphans(world, topic) == []


def test_a_trim_host_whose_clock_is_behind_still_gets_its_grace(world: World) -> None:
    """markedAt a day in the past: the daemon's grace runs from its own first sight, so the requests
    it reads before the write are looked at again, and deleted once the write has landed."""
    topic = "persistent://t/ns/skewed-trim"
    _trim_topic(world, topic)
    world.start()
    result = trim(world.store, topic, _sender_that_waits_for_the_daemon(world), offline=True,
                  clock=lambda: time.time() - 86_400, write_within_s=GRACE_S)
    assert result.aborted is None and result.removed == [40, 41]
    assert all(_ends(world, lid) == ["reconsumed"] for lid in (40, 41))
    world.drain(lambda w: all("deleted" in _ends(w, lid) for lid in (40, 41)), timeout_s=60)
    assert _orphans(world, topic) == [] and not world.bk_exists(40) and not world.bk_exists(41)


# ---------------------------------------------------------------- compacted and delayed-bucket ledgers


def test_compacted_and_bucket_ledgers_go_exactly_when_nothing_references_them(world: World) -> None:
    """PIP-186 has no component for them; ours (COMPACTED_LEDGER, DELAYED_INDEX_BUCKET) are verified
    against BookKeeper's metadata and the references the reference model reads, with the age guard."""
    old = now_ms() - 2 * DAY_MS
    live_t, gone_t, hidden_t = ("persistent://t/ns/compacted-live", "persistent://t/ns/compacted-gone",
                                "persistent://t/ns/compacted-hidden")
    w = world.writer
    for topic in (live_t, hidden_t):
        w.managed_ledger(topic, [1])
    w.cursor(live_t, "__compaction", Position(1, 0), properties={"CompactedTopicLedger": 51})
    w.cursor(hidden_t, "__compaction", Position(1, 0), cursors_ledger_id=70, properties={"CompactedTopicLedger": 80})
    expected = {50: "deleted", 51: "still_in_use", 60: "deleted", 81: "still_in_use", 61: "reconsumed"}
    for lid, topic in ((50, live_t), (51, live_t), (60, gone_t), (81, hidden_t)):
        w.bk_ledger(lid, compacted_custom_metadata(topic), ctime_ms=old)
    w.bk_ledger(61, compacted_custom_metadata(gone_t))  # young: no proof ever covers a compaction
    bucket_t = "persistent://t/ns/delayed"
    w.managed_ledger(bucket_t, [1])
    w.cursor(bucket_t, "sub", Position(1, 0), cursor_properties={"#pulsar.internal.delayed.bucket_1_5": "90"})
    for lid, cursor in ((90, "sub"), (91, "sub"), (92, "gone-sub")):
        w.bk_ledger(lid, bucket_custom_metadata(bucket_t, cursor), ctime_ms=old)
    expected |= {90: "still_in_use", 91: "deleted", 92: "deleted", 93: "metadata_mismatch"}
    w.bk_ledger(93, pulsar_custom_metadata(bucket_t), ctime_ms=old)  # a data ledger claimed as a bucket
    world.start()
    for lid in (50, 51, 60, 81, 61):
        topic = {50: live_t, 51: live_t, 81: hidden_t}.get(lid, gone_t)
        world.service.send_pending_delete(request(topic, lid, "COMPACTED_LEDGER", reason="orphan"))
    for lid, cursor in ((90, "sub"), (91, "sub"), (92, "gone-sub"), (93, "sub")):
        world.service.send_pending_delete(request(bucket_t, lid, "DELAYED_INDEX_BUCKET", reason="orphan",
                                                  cursorName=cursor))
    world.drain(_settled(*expected))
    assert {lid: _ends(world, lid)[0] for lid in expected} == expected
    assert {lid for lid, end in expected.items() if world.bk_exists(lid) != (end != "deleted")} == set()
    [hidden] = [s for s in world.settled if s.request is not None and s.request.ledger_id == 81]
    assert "cursor ledger 70" in hidden.action.reason


def test_a_cursor_over_its_persist_budget_keeps_the_property_that_references_its_compacted_ledger(
        world: World) -> None:
    """The persist budget may leave out producer sequence ids (``properties``), but never
    ``CompactedTopicLedger``: without it the compacted ledger looks unreferenced, and with the
    COMPACTED_LEDGER component the daemon would delete a live topic's compacted data."""
    topic = "persistent://t/ns/compacted-over-budget"
    w = world.writer
    w.managed_ledger(topic, [1, 2])
    producers = {f"producer-{i:04d}": i for i in range(400)}  # ~10 KB of sequence ids, listed first
    w.cursor(topic, "__compaction", Position(1, 0), properties={**producers, "CompactedTopicLedger": 55})
    w.bk_ledger(55, compacted_custom_metadata(topic), ctime_ms=now_ms() - 2 * DAY_MS)
    outcome = reset_stored_cursor(world.store, topic, "__compaction", Position(2, 0),
                                  budget=PersistBudget(max_bytes=512))
    assert outcome is not None
    node = world.store.get(f"{managed_ledger_path(topic)}/__compaction")
    assert node is not None
    kept = decode_cursor(node.data).properties
    assert kept.get("CompactedTopicLedger") == 55 and len(kept) < len(producers)  # the budget did bite
    world.start()
    world.service.send_pending_delete(request(topic, 55, "COMPACTED_LEDGER", reason="orphan"))
    world.drain(_settled(55))
    assert _ends(world, 55) == ["still_in_use"] and world.bk_exists(55)
