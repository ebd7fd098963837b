"""Fuzz the consumer's decode path, as the admin API is fuzzed with schemathesis.

Two layers: hypothesis drives :func:`deletion_service.protocol.request.decode` with
thousands of hostile payloads (random bytes, deep nesting, huge numbers, wrong
types, invalid UTF-8, near-valid requests with one field broken) and requires
that it returns a request or raises ``InvalidRequest`` — nothing else; then a
few hundred of them go through the real broker to the real worker over real
ZooKeeper, next to live ledgers, and every one must end settled (acked or
dead-lettered) with no live ledger deleted.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings

from deletion_service.cluster_writer import pulsar_custom_metadata
from deletion_service.protocol.request import InvalidRequest, decode
from metastore import open_store
from metastore.formats import LedgerInfo, Position
from tests.support.deletion_world import World, make_world, now_ms
from tests.support.harness import PulsarLiteBroker, ZooKeeperServer
from tests.support.hostile_requests import VALID, hostile, near_valid


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile)
def test_decode_returns_a_request_or_refuses_it(payload: bytes) -> None:
    try:
        request = decode(payload)
    except InvalidRequest as e:
        assert str(e), "a refusal says why"
        return
    # Whatever decodes is consistent and serialises back to itself.
    assert decode(request.to_json()) == request


@pytest.fixture
def world(zk_url: str, zookeeper: ZooKeeperServer, pulsar_broker: PulsarLiteBroker) -> Iterator[World]:
    store = open_store(zk_url)
    bk_store = open_store(f"{zookeeper.url}/bk-{uuid.uuid4().hex[:8]}")
    w = make_world(store, bk_store, pulsar_broker.service_url, twoPhaseDeletionReconsumeLaterInSeconds=0,
                   twoPhaseDeletionMaxRetryDeleteCount=1, minLedgerAgeSeconds=0, twoPhaseDeletionInUseGraceSeconds=0)
    yield w
    w.service.close()
    w.service.broker.close()
    store.close()
    bk_store.close()


FUZZ_MESSAGES = 300


def test_hostile_messages_through_the_real_daemon_delete_nothing_and_all_settle(world: World) -> None:
    live = "persistent://t/ns/live"
    listed = list(range(1, 21))
    for lid in listed:
        world.writer.bk_ledger(lid, pulsar_custom_metadata(live))
    world.writer.managed_ledger(live, [*listed, LedgerInfo(21)])
    world.writer.cursor(live, "sub", Position(1, 0))
    rng = random.Random(20261122)
    payloads = [hostile.example() if i % 3 else near_valid().example() for i in range(FUZZ_MESSAGES)]
    # and the one shape that matters most: well-formed requests for the live, listed ledgers
    payloads += [json.dumps({**VALID, "ledgerId": rng.choice(listed), "markedAt": now_ms(),
                             "reason": rng.choice(["manual", "orphan", "trim"])}).encode() for _ in range(30)]
    world.start()
    producer = world.service.publisher._producer(world.service.topics.partition_topics[0])  # noqa: SLF001
    for p in payloads:
        producer.send(p)
    world.drain(lambda wd: len(wd.settled) >= len(payloads)
                and wd.worker is not None and wd.worker.idle, timeout_s=240)
    assert all(world.bk_exists(lid) for lid in listed), "a fuzzed message deleted a live ledger"
    outcomes = {s.outcome.value for s in world.settled}
    assert outcomes <= {"dlq", "still_in_use", "absent", "metadata_mismatch", "reconsumed"}
    print(f"fuzz: {len(payloads)} messages through the daemon, {len(world.settled)} settlements, "
          f"0 crashes, 0 live ledgers deleted")
