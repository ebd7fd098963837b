"""Pipelined sends on the real embedded broker: every receipt, in order, and every body delivered."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from deletion_service.broker.interface import BrokerClient, BrokerError, Consumer, Outgoing, Producer
from deletion_service.broker.publisher import RequestPublisher
from deletion_service.broker.pulsar_client import SEND_WINDOW, PulsarBrokerClient
from deletion_service.protocol.request import PendingDeleteLedgerInfo, decode
from deletion_service.protocol.topics import DeletionTopics
from tests.support.harness import PulsarLiteBroker


@pytest.fixture
def client(pulsar_broker: PulsarLiteBroker) -> Iterator[BrokerClient]:
    c = PulsarBrokerClient(pulsar_broker.service_url)
    yield c
    c.close()


def position(message_id: str) -> tuple[int, int]:
    """(ledger, entry) of a message id as text, ``(L,E,P,B)``: a consumer of several partitions
    fills in the partition index the producer's receipt leaves at -1."""
    ledger, entry = message_id.strip("()").split(",")[:2]
    return int(ledger), int(entry)


def receive_all(consumer: Consumer, count: int, timeout_s: float = 30) -> dict[tuple[str, tuple[int, int]], bytes]:
    """(topic, position) → body of ``count`` messages (acked as they come)."""
    got: dict[tuple[str, tuple[int, int]], bytes] = {}
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.receive(1.0)
        if message is not None:
            got[(message.topic, position(message.message_id))] = message.data
            consumer.ack(message)
    return got


def test_send_many_returns_every_receipt_in_order_and_every_body_arrives(client: BrokerClient) -> None:
    topic = f"persistent://public/default/send-many-{uuid.uuid4().hex[:8]}"
    client.ensure_subscription(topic, "check")
    producer = client.producer(topic)
    bodies = [f"message {i}".encode() for i in range(250)]  # three windows: 100, 100, 50
    assert len(bodies) > 2 * SEND_WINDOW
    ids = producer.send_many([Outgoing(body, {"n": str(i)}) for i, body in enumerate(bodies)])
    producer.close()
    assert all(isinstance(i, str) for i in ids), [i for i in ids if not isinstance(i, str)][:3]
    assert len(ids) == 250 and len(set(ids)) == 250
    consumer = client.consumer([topic], "check")
    try:
        received = receive_all(consumer, 250)
    finally:
        consumer.close()
    assert sorted(received.values()) == sorted(bodies)
    assert [received[(topic, position(i))] for i in ids] == bodies  # type: ignore[arg-type]  # each receipt is the id of the message at its index


def test_a_message_the_client_refuses_fails_alone(client: BrokerClient) -> None:
    topic = f"persistent://public/default/send-many-{uuid.uuid4().hex[:8]}"
    client.ensure_subscription(topic, "check")
    producer = client.producer(topic)
    not_bytes = Outgoing("text, not bytes")  # type: ignore[arg-type]  # provokes a synchronous refusal
    results = producer.send_many([Outgoing(b"a"), not_bytes, Outgoing(b"c")])
    producer.close()
    assert isinstance(results[0], str) and isinstance(results[2], str)
    assert isinstance(results[1], BrokerError) and "refused" in str(results[1])


def test_send_requests_answers_in_the_input_order_across_partitions(client: BrokerClient) -> None:
    topics = DeletionTopics(f"persistent://pulsar/system/__sm-{uuid.uuid4().hex[:8]}", partitions=3)
    publisher = RequestPublisher(client, topics)
    requests = [PendingDeleteLedgerInfo.model_validate({
        "topicName": "persistent://t/ns/orders", "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER",
        "ledgerId": lid, "markedAt": 1, "reason": "trim"}) for lid in range(1, 131)]
    ids = publisher.send_requests(requests)
    publisher.close()
    assert all(isinstance(i, str) for i in ids) and len(ids) == len(requests)
    consumer = client.consumer(topics.partition_topics, topics.subscription)
    try:
        received = receive_all(consumer, len(requests))
    finally:
        consumer.close()
    assert len(received) == len(requests)
    by_receipt = [received[(topics.partition_for(r.ledger_id), position(i))]  # type: ignore[arg-type]
                  for r, i in zip(requests, ids, strict=True)]
    assert [decode(body).ledger_id for body in by_receipt] == [r.ledger_id for r in requests]


class _Flaky(Producer):
    """Test double for a broker failure on one message, to check the interface's default."""

    def send(self, data: bytes, properties: dict[str, str] | None = None, deliver_after_s: float = 0) -> str:
        if data == b"bad":
            raise BrokerError("refused")
        return f"id-{data.decode()}-{deliver_after_s}-{properties}"

    def close(self) -> None:
        pass


def test_the_default_send_many_goes_one_at_a_time_and_reports_each_failure() -> None:
    results = _Flaky().send_many([Outgoing(b"a"), Outgoing(b"bad"), Outgoing(b"c", {"k": "v"}, 2.0)])
    assert results[0] == "id-a-0.0-{}" and isinstance(results[1], BrokerError)
    assert results[2] == "id-c-2.0-{'k': 'v'}"


def test_send_batches_keeps_every_partition_in_flight_and_answers_each_batch(client: BrokerClient) -> None:
    topics = [f"persistent://public/default/send-batches-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    producers: list[Producer] = []
    for topic in topics:
        client.ensure_subscription(topic, "check")
        producers.append(client.producer(topic))
    batches = [(producers[0], [Outgoing(b"p0-%d" % i) for i in range(SEND_WINDOW + 30)]),
               (producers[1], [Outgoing(b"p1-%d" % i) for i in range(10)]),
               (_Flaky(), [Outgoing(b"bad"), Outgoing(b"ok")])]  # not the client's own: its send_many answers
    answers = client.send_batches(batches)
    for producer in producers:
        producer.close()
    assert [len(a) for a in answers] == [SEND_WINDOW + 30, 10, 2]
    assert all(isinstance(i, str) for a in answers[:2] for i in a)
    assert isinstance(answers[2][0], BrokerError) and answers[2][1] == "id-ok-0.0-{}"


def test_a_message_whose_properties_cannot_be_decoded_is_read_without_them() -> None:
    """Fault injection the real client cannot produce here (a producer in another language sending
    properties that are not UTF-8; the Python client encodes str): a stand-in message whose
    ``properties()`` raises as the binding would.  One such message must never stop a consumer."""
    from deletion_service.broker.pulsar_client import _received

    class Undecodable:
        def data(self) -> bytes:
            return b"{}"

        def properties(self) -> dict[str, str]:
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")

        def topic_name(self) -> str:
            return "persistent://t/ns/x"

        def message_id(self) -> str:
            return "1:2"

        def publish_timestamp(self) -> int:
            return 5

    got = _received(Undecodable())  # type: ignore[arg-type]
    assert (got.data, got.properties, got.message_id) == (b"{}", {}, "1:2")
