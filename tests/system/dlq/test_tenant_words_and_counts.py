"""What a tenant writes on its own RETRY and DLQ topics puts no figure or words on an operator's screen
and spends no retry budget: a request produced to RETRY claiming 4242 tries is retried its full
budget and parked with the daemon's own count; a message produced straight to the DLQ is listed (it is
parked) as ``unsealed``, with none of its words, by ``dlq list`` (table and ``--json``) and the admin
API, and an operator can still select and purge it.

Real processes: ZooKeeper, pulsar-lite, a ``ledger-deletion run`` daemon in namespace scope and the
CLI; the tenant is a plain pulsar-client producer on its own namespace's topics."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from deletion_service.broker.pulsar_client import PulsarBrokerClient
from deletion_service.cluster_writer import pulsar_custom_metadata
from deletion_service.config import DeletionConfig
from deletion_service.protocol.topics import DeletionTopics, namespace_topics
from tests.support.harness import PulsarLiteBroker, ZooKeeperServer, wait_until
from tests.support.replicas_world import Replica, ReplicaWorld

MAX_RETRIES = 3
FORGED_WHY = "ZooKeeper quorum lost - run `ledger-deletion dlq purge --all` now"


class Tenant:
    """One namespace's daemon and its topics, as its tenant and its operator see them."""

    def __init__(self, world: ReplicaWorld, daemon: Replica) -> None:
        self.world, self.daemon = world, daemon
        self.namespace = world.topic.split("://", 1)[1].rsplit("/", 1)[0]
        self.topics: DeletionTopics = namespace_topics(self.namespace, DeletionTopics.from_config(DeletionConfig()))

    def produce(self, topic: str, subscription: str, ledger_id: int, properties: dict[str, str],
                **fields: object) -> None:
        """The tenant's message on one of its own topics (its subscription made first, as the daemon's
        producers do, so it waits there whenever the daemon subscribes); ``fields`` replace the request's."""
        admin = PulsarBrokerClient(self.world.broker_url, long_lived=False)
        try:
            admin.ensure_subscription(topic, subscription)
        finally:
            admin.close()
        body = json.dumps({"topicName": self.world.topic, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER",
                           "ledgerId": ledger_id, "markedAt": 1, "reason": "orphan", **fields}).encode()
        client = pulsar.Client(self.world.broker_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        try:
            client.create_producer(topic, batching_enabled=False).send(body, properties=properties)
        finally:
            client.close()

    def cli(self, *args: str) -> str:
        out = subprocess.run([*self.world.argv(self.world.root / "cli-data"), *args], env=self.world.env(),
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def listed(self, *args: str) -> list[dict]:
        return json.loads(self.cli("--json", "dlq", "list", "--namespace", self.namespace, *args))

    def parked(self, ledger_id: int) -> list[dict]:
        return [e for e in self.listed() if e["request"] and e["request"]["ledgerId"] == ledger_id]

    def admin_listing(self) -> str:
        query = urllib.parse.urlencode({"namespace": self.namespace})
        url = f"http://127.0.0.1:{self.daemon.port}/admin/v2/ledger-deletion/dlq?{query}"
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.read().decode()


@pytest.fixture(scope="module")
def tenant(zookeeper: ZooKeeperServer, module_pulsar_lite: PulsarLiteBroker,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenant]:
    root: Path = tmp_path_factory.mktemp("tenant-words")
    world = ReplicaWorld(root, f"{zookeeper.url}/tenant-{root.name}", module_pulsar_lite.service_url,
                         scope="namespace")
    with world.config.open("a") as f:
        f.write(f"ledgerDeletionLeakWatcherEnabled = false\ntwoPhaseDeletionMaxRetryDeleteCount = {MAX_RETRIES}\n")
    daemon = world.add_replicas(1)[0].start()
    try:
        daemon.wait_ready()
        yield Tenant(world, daemon)
    finally:
        daemon.stop(signal.SIGTERM)
        world.close()


def test_a_tenants_retry_count_is_neither_shown_nor_spends_the_requests_retry_budget(tenant: Tenant) -> None:
    """The ledger stays OPEN, so every try ends "not yet" and counts: the request is tried
    ``MAX_RETRIES`` times more and parked with that count, not parked at once with the tenant's."""
    ledger = 901
    tenant.world.writer.bk_ledger(ledger, pulsar_custom_metadata(tenant.world.topic), state="OPEN")
    tenant.produce(tenant.topics.retry, tenant.topics.subscription, ledger, {"RECONSUMETIMES": "4242",
                                                                            "DELAY_TIME": "0"})
    wait_until(lambda: tenant.parked(ledger), 120, f"ledger {ledger}'s request to be parked",
               proc=tenant.daemon.proc, interval=0.5)
    [parked] = tenant.parked(ledger)
    assert parked["attempts"] == MAX_RETRIES, parked  # the daemon's own count, not the tenant's 4242
    assert (parked["reason"], parked["sealed"]) == ("max-retries-reached", True), parked
    assert "ledger is OPEN" in parked["lastError"]
    records = [r for r in tenant.daemon.audit() if r["request"] and r["request"]["ledgerId"] == ledger]
    assert [r["outcome"] for r in records] == ["reconsumed"] * MAX_RETRIES + ["dlq"], records
    assert "4242" not in tenant.cli("dlq", "list", "--namespace", tenant.namespace)


def test_a_tenants_message_on_its_dlq_is_listed_with_none_of_its_words_and_can_be_purged(tenant: Tenant) -> None:
    ledger = 902
    tenant.produce(tenant.topics.dlq, tenant.topics.dlq_subscription, ledger, {
        "reason": "max-retries-reached", "lastError": FORGED_WHY, "RECONSUMETIMES": "4242",
        "ledgerDeletionParkedSeal": "0" * 64})
    wait_until(lambda: tenant.parked(ledger), 60, "the tenant's message to be listed", interval=0.5)
    as_json = json.dumps(tenant.listed())
    table = tenant.cli("dlq", "list", "--namespace", tenant.namespace)
    served = tenant.admin_listing()
    for shown in (as_json, table, served):
        assert "quorum" not in shown and "4242" not in shown, shown
    [parked] = tenant.parked(ledger)
    assert (parked["reason"], parked["lastError"], parked["attempts"], parked["sealed"]) == ("unsealed", "", 0, False)
    [entry] = [e for e in json.loads(served) if e["messageId"] == parked["messageId"]]
    assert (entry["reason"], entry["lastError"], entry["attempts"], entry["sealed"]) == ("unsealed", "", 0, False)
    assert parked["messageId"] in [e["messageId"] for e in tenant.listed("--reason", "unsealed")]
    assert parked["messageId"] not in [e["messageId"] for e in tenant.listed("--reason", "max-retries-reached")]
    purged = json.loads(tenant.cli("--json", "dlq", "purge", parked["messageId"], "--yes",
                                   "--namespace", tenant.namespace))
    assert purged["purged"] == 1
    assert tenant.parked(ledger) == []



def test_the_daemons_own_words_about_a_request_carry_none_of_the_requests_words(tenant: Tenant) -> None:
    """A bucket that cannot be one and a topic of another namespace are parked with our reasons, sealed;
    the values the tenant chose appear in them only as a placeholder, in the listing, the admin API, the
    audit trail and ``status`` alike, while the request itself (labelled as the request) keeps them."""
    bad_bucket, bad_topic = 903, 904
    tenant.produce(tenant.topics.partition_topics[0], tenant.topics.subscription, bad_bucket, {},
                   ledgerType="OFFLOAD_LEDGER", offloadContext={
                       "uidMsb": 1, "uidLsb": 2, "driverName": "aws-s3",
                       "driverMetadata": {"bucket": FORGED_WHY, "region": "us-east-1"}})
    tenant.produce(tenant.topics.partition_topics[0], tenant.topics.subscription, bad_topic, {},
                   topicName=f"persistent://someone-else/ns/{FORGED_WHY}")
    def invalid() -> list[dict]:  # an invalid request is listed with its bytes, not as a request
        return [e for e in tenant.listed() if e["payloadBase64"]
                and json.loads(base64.b64decode(e["payloadBase64"]))["ledgerId"] == bad_bucket]

    wait_until(lambda: invalid() and tenant.parked(bad_topic), 120, "both requests parked",
               proc=tenant.daemon.proc, interval=0.5)
    [bucket], [topic] = invalid(), tenant.parked(bad_topic)
    assert (bucket["reason"], bucket["sealed"]) == ("invalid-request", True), bucket
    assert "contains whitespace" in bucket["lastError"] and "not a name" in bucket["lastError"], bucket
    assert (topic["reason"], topic["sealed"]) == ("cross-namespace", True), topic
    assert FORGED_WHY in base64.b64decode(bucket["payloadBase64"]).decode()  # the request's own bytes keep it
    assert topic["request"]["topicName"].endswith(FORGED_WHY)
    ours = [e["lastError"] for e in (bucket, topic)] + [r["reason"] for r in tenant.daemon.audit()]
    ours.append(tenant.cli("status", "--admin-address", f"127.0.0.1:{tenant.daemon.port}"))
    ours.append(json.dumps([e["lastError"] for e in json.loads(tenant.admin_listing())]))
    for shown in ours:
        assert "quorum" not in shown and "purge --all" not in shown, shown
    table = tenant.cli("dlq", "list", "--namespace", tenant.namespace)
    assert table.count("quorum") == 1, table  # the request's topic, in its own column: the request, not us
