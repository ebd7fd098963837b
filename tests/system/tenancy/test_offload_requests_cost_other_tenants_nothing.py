"""One tenant's requests for offloaded copies cost other tenants nothing: a request naming more parts
than one request may is parked before any storage call, one within the bound costs one S3 listing a
part, and another namespace's genuine copies are deleted in their turn, not behind the flood.

Real processes: a ``run`` daemon in namespace scope, ZooKeeper (a chroot), pulsar-lite (the module's),
``moto_server`` (the module's own, so its request log counts this daemon's S3 calls only).  The
forged requests are produced straight onto the tenant's own request topic, as any client with produce
rights there could.  Fairness is judged by order, not time: how many of the flood's requests the daemon
settled between the victim's requests being sent and the victim's last copy being deleted.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from pathlib import Path

import boto3
import pulsar
import pytest

from deletion_service.delete_phase.storage.offload_cost import MAX_PARTS_CHECKED
from tests.support.deletion_world import S3Bucket
from tests.support.harness import MotoS3Server, PulsarLiteBroker, wait_until
from tests.support.metrics_scrape import metric_sum
from tests.support.replica_tools import metrics
from tests.support.replicas_world import Replica, ReplicaWorld

BUCKET = "offload"
#: A line of moto's request log: one S3 call (werkzeug colours a 4xx line: an escape before the method).
S3_CALL = re.compile(r'"(?:\x1b\[[0-9;]*m)?(?:GET|HEAD|PUT|POST|DELETE) /')


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoS3Server]:
    server = MotoS3Server(tmp_path_factory.mktemp("moto")).start()
    boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1").create_bucket(Bucket=BUCKET)
    yield server
    server.stop()


@pytest.fixture
def world(tmp_path: Path, zk_url: str, module_pulsar_lite: PulsarLiteBroker,
          moto: MotoS3Server) -> Iterator[ReplicaWorld]:
    w = ReplicaWorld(tmp_path, zk_url, module_pulsar_lite.service_url, scope="namespace")
    with w.config.open("a") as f:
        f.write(f'ledgerDeletionLeakWatcherEnabled = false\noffloadAllowedBuckets = ["{BUCKET}"]\n'
                f'offloadAllowedEndpoints = ["{moto.endpoint}"]\n')
    yield w
    for replica in w.replicas:
        replica.stop()  # SIGTERM: a killed one's consumers would stay on the module's broker
    w.close()


def s3_calls(moto: MotoS3Server) -> int:
    return sum(1 for line in moto.log_path.read_text(errors="replace").splitlines() if S3_CALL.search(line))


def produce(world: ReplicaWorld, namespace: str, bodies: list[dict]) -> None:
    """Onto ``namespace``'s own request topic, unbatched, as a tenant's client would."""
    client = pulsar.Client(world.broker_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(f"persistent://{namespace}/__ledger_deletion", batching_enabled=False)
        for body in bodies:
            producer.send(json.dumps(body).encode())
        producer.close()
    finally:
        client.close()


def forged(world: ReplicaWorld, bucket: S3Bucket, ledger_id: int, segments: int) -> dict:
    """A request for ``segments`` streaming segments that never existed, on the tenant's own topic."""
    rng = random.Random(ledger_id)
    context = bucket.offload_context(0, 0, [(rng.getrandbits(62), rng.getrandbits(62)) for _ in range(segments)])
    return {"topicName": world.topic, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "OFFLOAD_LEDGER",
            "ledgerId": ledger_id, "offloadContext": context, "reason": "orphan", "markedAt": 1}


def namespace_of(world: ReplicaWorld) -> str:
    """The tenant's namespace (the world's topic's), whose own request topic it produces to."""
    return world.topic.split("://")[1].rsplit("/", 1)[0]


def records(replica: Replica, ledger_ids: set[int]) -> list[dict]:
    return [r for r in replica.audit() if r["request"].get("ledgerId") in ledger_ids]


def started(world: ReplicaWorld) -> Replica:
    replica = world.add_replicas(1)[0].start()
    replica.wait_ready()
    return replica


def test_a_request_naming_more_parts_than_one_may_is_parked_with_its_reason_before_any_storage_call(
        world: ReplicaWorld, moto: MotoS3Server) -> None:
    bucket = S3Bucket(moto.endpoint, BUCKET)
    replica = started(world)
    before = s3_calls(moto)
    produce(world, namespace_of(world), [forged(world, bucket, 4242, 1024)])
    wait_until(lambda: bool(records(replica, {4242})), 120, "the 1,024-segment request settled", interval=0.3)
    cost = s3_calls(moto) - before
    assert cost == 0, f"a request naming 1,024 segments cost {cost} S3 calls"
    [record] = records(replica, {4242})
    assert record["outcome"] == "dlq", record
    assert "names 1024 parts" in record["reason"] and "one request per segment" in record["reason"], record


def test_a_request_at_the_bound_costs_one_s3_call_a_part(world: ReplicaWorld, moto: MotoS3Server) -> None:
    bucket = S3Bucket(moto.endpoint, BUCKET)
    replica = started(world)
    before = s3_calls(moto)
    produce(world, namespace_of(world), [forged(world, bucket, 4243, MAX_PARTS_CHECKED)])
    wait_until(lambda: bool(records(replica, {4243})), 120, "the request at the bound settled", interval=0.3)
    cost = s3_calls(moto) - before
    assert cost <= MAX_PARTS_CHECKED, f"a request naming {MAX_PARTS_CHECKED} absent parts cost {cost} S3 calls"
    [record] = records(replica, {4243})
    assert record["outcome"] == "absent", record


def test_another_namespaces_genuine_copies_are_deleted_in_their_turn_not_behind_a_flood(
        world: ReplicaWorld, moto: MotoS3Server) -> None:
    bucket = S3Bucket(moto.endpoint, BUCKET)
    victim_topic = f"persistent://v{world.tag}/ns/orders"
    world.writer.managed_ledger(victim_topic, [])  # the victim's namespace, discovered as the daemon starts
    replica = started(world)

    flood = list(range(70_000, 70_020))  # each the dearest request still checked: a listing a part
    produce(world, namespace_of(world), [forged(world, bucket, lid, MAX_PARTS_CHECKED) for lid in flood])
    wait_until(lambda: metric_sum(metrics(replica), "pulsar_ledger_deletion_received_total") >= len(flood), 60,
               "the flood received")

    victims, names = list(range(50_000, 50_005)), []
    requests = []
    for k, lid in enumerate(victims):
        names += bucket.offload_ledger(victim_topic, lid, 0x77, 0x100 + k)
        requests.append({"topicName": victim_topic, "ledgerComponent": "MANAGED_LEDGER",
                         "ledgerType": "OFFLOAD_LEDGER", "ledgerId": lid, "offloadContext":
                         bucket.offload_context(0x77, 0x100 + k), "reason": "orphan", "markedAt": 1})
    settled_before = len(records(replica, set(flood)))
    assert settled_before < len(flood) - 10, "the flood was over before the victim asked: nothing judged"
    produce(world, f"v{world.tag}/ns", requests)

    wait_until(lambda: not (bucket.keys() & set(names)), 240, "the victim's copies deleted", interval=0.3)
    wait_until(lambda: len(records(replica, set(victims))) == len(victims), 30, "the victim's records")
    trail = replica.audit()
    last_victim = max(r["seq"] for r in trail if r["request"].get("ledgerId") in victims)
    overtaking = sum(1 for r in trail if r["request"].get("ledgerId") in flood and r["seq"] < last_victim) \
        - settled_before
    assert all(r["outcome"] == "deleted" for r in records(replica, set(victims)))
    assert overtaking <= 6, (f"{overtaking} of the flood's {len(flood) - settled_before} queued requests were "
                             "settled before the victim's copies: served in arrival order, not in turns")
