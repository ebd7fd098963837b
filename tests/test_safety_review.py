"""Findings of the outside review of issue 27's fixes (an attacker with produce rights, and two
operators at once), each reproduced with the real processes first; each test failed on the code
it was found on (6379a38)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest

from deletion_service.cluster_writer import pulsar_custom_metadata
from metastore import open_store
from tests.deletion_world import DAY_MS, World, make_world, now_ms, request, send_raw
from tests.harness import PulsarLiteBroker, ZooKeeperServer


@pytest.fixture
def world(zk_url: str, zookeeper: ZooKeeperServer, pulsar_broker: PulsarLiteBroker) -> Iterator[World]:
    store = open_store(zk_url)
    bk_store = open_store(f"{zookeeper.url}/bk-{uuid.uuid4().hex[:8]}")
    w = make_world(store, bk_store, pulsar_broker.service_url, twoPhaseDeletionReconsumeLaterInSeconds=1,
                   twoPhaseDeletionMaxRetryDeleteCount=3)
    yield w
    w.service.close()
    w.service.broker.close()
    store.close()
    bk_store.close()


def test_a_topic_name_no_metadata_request_can_carry_costs_only_its_own_request(
        world: World, pulsar_broker: PulsarLiteBroker) -> None:
    """350,000 '%' make a 350 KB request whose managed-ledger path URL-encodes to ~1 MB, over
    ZooKeeper's jute.maxbuffer: ZooKeeper dropped the daemon's connection on every batch holding it,
    the breaker took that for an outage (no retry counted), and the batch ran again, for ever: nobody's
    requests were deleted.  Now the name is invalid before any I/O."""
    topic = "persistent://t/ns/good"
    genuine = list(range(100, 110))
    for lid in genuine:
        world.writer.bk_ledger(lid, pulsar_custom_metadata(topic), ctime_ms=now_ms() - 3 * DAY_MS)
    poison = json.dumps({"topicName": "persistent://t/ns/" + "%" * 350_000, "ledgerComponent": "MANAGED_LEDGER",
                         "ledgerType": "LEDGER", "ledgerId": 999, "markedAt": now_ms(), "reason": "trim"}).encode()
    world.start()
    partition = world.service.topics.partition_for(999)
    send_raw(pulsar_broker.service_url, partition, [poison])
    for lid in genuine:
        world.service.send_pending_delete(request(topic, lid))
    deadline = time.monotonic() + 60
    while sum(world.outcomes().values()) < len(genuine) + 1:
        assert time.monotonic() < deadline, f"stalled: {world.outcomes()}; breakers: {world.worker.breakers.down()}"
        world.worker.run_once(0.2)  # type: ignore[union-attr]
    assert world.outcomes() == {"deleted": len(genuine), "dlq": 1}
    [parked] = [s for s in world.settled if s.outcome.value == "dlq"]
    assert "too long" in parked.action.reason
