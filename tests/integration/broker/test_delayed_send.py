"""A delayed send (a RETRY copy) through the real client on the embedded broker: receipted and delivered.

pulsar-lite has no delayed delivery, so this does not show the delay; it shows that the client
takes the ``deliver_after`` the broker interface derives from ``deliver_after_s``, on both the
one-message and the pipelined path (a RETRY copy is always sent with a delay).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from deletion_service.broker.interface import BrokerClient, Outgoing
from deletion_service.broker.pulsar_client import PulsarBrokerClient
from tests.support.harness import PulsarLiteBroker


@pytest.fixture
def client(pulsar_broker: PulsarLiteBroker) -> Iterator[BrokerClient]:
    c = PulsarBrokerClient(pulsar_broker.service_url)
    yield c
    c.close()


def test_delayed_sends_are_receipted_and_delivered(client: BrokerClient) -> None:
    topic = f"persistent://public/default/delayed-{uuid.uuid4().hex[:8]}"
    client.ensure_subscription(topic, "check")
    producer = client.producer(topic)
    one = producer.send(b"one", {"k": "v"}, deliver_after_s=0.5)
    many = producer.send_many([Outgoing(b"two", deliver_after_s=1.5), Outgoing(b"three")])
    producer.close()
    assert all(isinstance(i, str) for i in [one, *many]), many
    consumer = client.consumer([topic], "check")
    got: dict[bytes, dict[str, str]] = {}
    deadline = time.monotonic() + 30
    try:
        while len(got) < 3 and time.monotonic() < deadline:
            message = consumer.receive(1.0)
            if message is not None:
                got[message.data] = message.properties
                consumer.ack(message)
    finally:
        consumer.close()
    assert set(got) == {b"one", b"two", b"three"} and got[b"one"] == {"k": "v"}
