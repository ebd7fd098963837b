"""pulsar-lite keys consumer ids across connections; our client makes them unique.

Each ``pulsar.Client`` numbers its consumers from 0 (the C++ ``ClientImpl`` holds the counter), so
two clients in one process stand for two processes exactly: the raw failure and the fix are shown
here with clients, quickly; ``test_replicas.py`` runs the daemons as separate processes.
"""

from __future__ import annotations

import uuid

import pulsar
import pytest

from deletion_service.broker.consumer_ids import BLOCK_SIZE, BURN_TOPIC, TICKET_TOPIC, server_version
from deletion_service.broker.pulsar_client import PulsarBrokerClient
from tests.support.harness import PulsarLiteBroker, free_port
from tests.support.metrics_scrape import label_values


def _topic() -> str:
    return f"persistent://public/default/ids-{uuid.uuid4().hex[:10]}"


def test_two_raw_clients_on_one_shared_subscription_collide_on_consumer_id_0(pulsar_broker: PulsarLiteBroker) -> None:
    """The raw failure: the second client's consumer 0 is refused, and it only sees a timeout."""
    topic = _topic()
    first = pulsar.Client(pulsar_broker.service_url, operation_timeout_seconds=2)
    second = pulsar.Client(pulsar_broker.service_url, operation_timeout_seconds=2)
    try:
        first.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared)
        with pytest.raises(pulsar.Timeout):
            second.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared)
    finally:
        first.close()
        second.close()
    assert "Consumer 0 already exists" in pulsar_broker.log_tail(400)


def test_three_of_our_clients_share_one_subscription_and_each_message_goes_to_one(
        pulsar_broker: PulsarLiteBroker) -> None:
    """The fix: three clients (three counters from 0) subscribe at once; 300 messages are each received
    by exactly one of them.  Before it, the second subscribe timed out (here after 3 s)."""
    topic = _topic()
    clients = [PulsarBrokerClient(pulsar_broker.service_url, operation_timeout_s=3) for _ in range(3)]
    try:
        consumers = [c.consumer([topic], "shared", receiver_queue_size=10) for c in clients]
        producer = clients[0].producer(topic)
        sent = {producer.send(f"m{i}".encode()) for i in range(300)}
        received: list[list[str]] = [[] for _ in consumers]
        idle = 0
        while idle < 3:  # every consumer came back empty three rounds running: the topic is drained
            idle += 1
            for k, consumer in enumerate(consumers):
                message = consumer.receive(0.2)
                if message is not None:
                    consumer.ack(message)
                    received[k].append(message.message_id)
                    idle = 0
        together = [m for mine in received for m in mine]
        assert sorted(together) == sorted(sent), "a message lost or received twice"
        assert all(received), [len(r) for r in received]  # small queues: each client gets a share
        burnt = sorted(c._consumer_ids.burnt for c in clients)  # noqa: SLF001 - what the workaround did
        assert len(set(burnt)) == 3 and all(b % BLOCK_SIZE == 0 for b in burnt), burnt
    finally:
        for c in clients:
            c.close()


def test_the_workaround_recognises_pulsar_lite_and_nothing_else(pulsar_broker: PulsarLiteBroker) -> None:
    assert (server_version(pulsar_broker.service_url) or "").lower().startswith("pulsar-lite")
    assert server_version(f"pulsar://127.0.0.1:{free_port()}") is None  # nothing listening
    assert server_version("pulsar+ssl://broker.example:6651") is None  # TLS: never ours to probe
    client = PulsarBrokerClient(pulsar_broker.service_url)
    try:
        assert not client.keeps_partition_metadata()
    finally:
        client.close()


def _subscriptions_on(broker: PulsarLiteBroker, topic: str) -> set[str]:
    """The subscriptions pulsar-lite lists for ``topic`` in ``/metrics`` (it keeps closed readers' too)."""
    return label_values(broker.metrics_text(), "pulsar_subscription_consumers_count", "subscription",
                        topic=topic.rsplit("/", 1)[1])


def test_burning_ids_leaves_at_most_one_subscription_per_client_and_none_on_the_ticket_topic(
        pulsar_broker: PulsarLiteBroker) -> None:
    """pulsar-lite keeps a closed reader's subscription, lists it in /metrics and walks it on every
    send: burning a daemon's hundreds of ids must leave nothing behind that grows with them."""
    tickets_before = _subscriptions_on(pulsar_broker, TICKET_TOPIC)
    burn_before = _subscriptions_on(pulsar_broker, BURN_TOPIC)
    clients = [PulsarBrokerClient(pulsar_broker.service_url, operation_timeout_s=3) for _ in range(3)]
    try:
        for client in clients:
            client.consumer([_topic()], "mine", receiver_queue_size=10)
        burnt = sum(c._consumer_ids.burnt for c in clients)  # noqa: SLF001 - what the workaround did
        assert burnt >= 3 * BLOCK_SIZE, burnt
        assert _subscriptions_on(pulsar_broker, TICKET_TOPIC) == tickets_before
        assert len(_subscriptions_on(pulsar_broker, BURN_TOPIC) - burn_before) <= len(clients)
    finally:
        for c in clients:
            c.close()
