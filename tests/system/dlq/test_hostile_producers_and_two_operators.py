"""An attacker with produce rights, and two operators at once, against the DLQ tools: each case
runs with the real processes."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from deletion_service.audit.topic_check import compare
from deletion_service.broker.interface import display_message_id
from deletion_service.broker.pulsar_client import PulsarBrokerClient
from deletion_service.cluster_writer import pulsar_custom_metadata
from deletion_service.dlq import operations as dlq
from deletion_service.dlq.marker import MarkerKey
from deletion_service.protocol.topics import DeletionTopics
from metastore import open_store
from metastore.interface import ABSENT
from tests.support.audit_entries import fill, lines
from tests.support.cli_runner import run_cli
from tests.support.deletion_world import DAY_MS, World, make_world, now_ms, request, send_raw
from tests.support.harness import PulsarLiteBroker, ZooKeeperServer


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


def test_the_cluster_topics_own_namespace_is_listed_and_requeued_once(
        zk_url: str, pulsar_broker: PulsarLiteBroker, tmp_path: Path) -> None:
    """Every cluster has the namespace its deletion topic lives in (``pulsar/system``); in namespace
    scope it was discovered like a tenant's, and its "own" topics are the cluster's: the unscoped
    ``dlq list`` showed a parked request twice and ``dlq requeue --all`` republished it twice."""
    tenant = f"sys-{uuid.uuid4().hex[:8]}"
    cluster = f"persistent://{tenant}/system/__ledger_deletion"
    with open_store(zk_url) as store:
        for path in ("/admin", "/admin/policies", f"/admin/policies/{tenant}", f"/admin/policies/{tenant}/system",
                     "/admin/policies/acme", "/admin/policies/acme/ns"):
            if store.get(path) is None:
                store.put(path, b"{}", ABSENT)
    cfg = tmp_path / "scope.toml"
    cfg.write_text(f'ledgerDeletionTopicScope = "namespace"\nledgerDeletionTopic = "{cluster}"\n')
    common = ["--metadata-store", zk_url, "--broker-url", pulsar_broker.service_url, "--config", str(cfg),
              "--data-dir", str(tmp_path / "data")]
    client = pulsar.Client(pulsar_broker.service_url)
    try:
        client.create_producer(f"{cluster}-DLQ").send(
            request("persistent://acme/ns/x", 4242).to_json(), properties={"reason": "max-retries-reached"})
    finally:
        client.close()
    listed = run_cli(*common, "--json", "dlq", "list")
    assert listed.returncode == 0, listed.stderr
    assert [e["request"]["ledgerId"] for e in json.loads(listed.stdout)] == [4242]
    requeued = run_cli(*common, "--json", "dlq", "requeue", "--all")
    assert requeued.returncode == 0, requeued.stderr
    assert json.loads(requeued.stdout)["requeued"] == 1


def test_records_anyone_adds_to_the_audit_topic_neither_crash_verify_nor_fake_an_edit(tmp_path: Path) -> None:
    """Whoever may produce to ``-AUDIT`` could crash ``audit verify`` with one deeply nested message
    (RecursionError), and make an intact trail read as edited by republishing a real record with
    another outcome beside the genuine copy.  The topic is a witness: its genuine copy still matches."""
    fill(tmp_path, 3)
    mine = [raw.rstrip(b"\n") for _, ls in lines(tmp_path) for raw in (x.encode() for x in ls)]
    real = json.loads(mine[0])
    forged = json.dumps({**real, "outcome": "absent", "reason": "forged"}, separators=(",", ":")).encode()
    on_topic = [*mine, b"[" * 200_000, forged]
    seen = compare("persistent://t/ns/x-AUDIT", mine, on_topic)
    assert seen.whole and seen.unreadable == 1, seen
    # an edit of the files is still caught: the genuine copy on the topic no longer matches anything
    edited = [forged, *mine[1:]]
    assert compare("persistent://t/ns/x-AUDIT", edited, mine).differing == (real["seq"],)


def test_a_settlement_marker_a_crash_left_unacked_is_acked_by_the_next_purge(
        zk_url: str, pulsar_broker: PulsarLiteBroker) -> None:
    """Markers already acked are re-acked by every purge or requeue without waiting for a dispatch that
    never comes (2 s per DLQ each time); one a crash left unacked is still found and acked."""
    topics = DeletionTopics(f"persistent://pulsar/system/__ld-{uuid.uuid4().hex[:10]}", 1)
    broker = PulsarBrokerClient(pulsar_broker.service_url)
    store = open_store(zk_url)
    try:
        key = MarkerKey.ensure(store)
        client = pulsar.Client(pulsar_broker.service_url)
        try:
            sub = client.subscribe(topics.dlq, topics.dlq_subscription, consumer_type=pulsar.ConsumerType.Shared,
                                   initial_position=pulsar.InitialPosition.Earliest)
            producer = client.create_producer(topics.dlq)
            parked = producer.send(request("persistent://t/ns/x", 77).to_json(), properties={"reason": "x"})
            sub.acknowledge(sub.receive(timeout_millis=5000))  # a purge's first step: the parked request acked
            # … then it died between sending its marker and acking it: a signed marker, unacked
            for body in key.bodies(topics.dlq, [display_message_id(str(parked))]):
                producer.send(body, {dlq.MARKER_PROPERTY: "purge"})
            sub.close()
        finally:
            client.close()
        purged = dlq.purge(broker, [topics], key, dlq.Selection(everything=True))
        assert purged == []  # the marker settled the parked request: nothing left to purge
        consumer = pulsar.Client(pulsar_broker.service_url)
        try:
            sub = consumer.subscribe(topics.dlq, topics.dlq_subscription, consumer_type=pulsar.ConsumerType.Shared)
            with pytest.raises(pulsar.Timeout):  # nothing left unacked: the marker was acked
                sub.receive(timeout_millis=1500)
        finally:
            consumer.close()
    finally:
        broker.close()
        store.close()
