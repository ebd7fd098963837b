"""A purge or requeue over many DLQs settles every DLQ it can.  One whose acknowledgement the broker
refuses is settled all the same by its signed marker: listed no more, and not sent back again by the
next requeue; its messages are acked by a later purge once the broker takes acks again.  One where not
even the marker can be written keeps its selected requests listed and is named in the one error, and
the others are settled all the same.

The failures are injected (acknowledging, or producing to, one DLQ raises): on pulsar-lite a tenant
produces the first for real by holding enough consumers on its own DLQ's subscription to take every
consumer id the command would use (about 1,600 consumers, and the command then waits out its timeouts
for most of a minute)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from deletion_service.broker.interface import BrokerError, Outgoing, Producer
from deletion_service.broker.pulsar_client import PulsarBrokerClient
from deletion_service.config import DeletionConfig
from deletion_service.dlq.marker import MarkerKey
from deletion_service.dlq.operations import Selection, list_dlq, purge, requeue
from deletion_service.protocol.topics import DeletionTopics
from metastore import open_store
from tests.support.harness import PulsarLiteBroker


class _AckFailsOn(PulsarBrokerClient):
    """The real client, whose acknowledgements on one DLQ fail, and optionally its producers there (the
    injected faults)."""

    failing = ""
    producing_fails = False
    acked: list[str] = []

    def acknowledge(self, topic: str, subscription: str, message_ids: Sequence[str],
                    likely_acked: Sequence[str] = ()) -> None:
        if topic == self.failing:
            raise BrokerError(f"cannot subscribe {subscription} on {topic}: TimeOut")
        self.acked = [*self.acked, *message_ids, *likely_acked]
        super().acknowledge(topic, subscription, message_ids, likely_acked)

    def producer(self, topic: str) -> Producer:
        if topic == self.failing and self.producing_fails:
            raise BrokerError(f"cannot create a producer on {topic}: TimeOut")
        return super().producer(topic)


def _park(client: PulsarBrokerClient, topics: DeletionTopics, count: int) -> None:
    producer = client.producer(topics.dlq)
    try:
        producer.send_many([Outgoing(json.dumps({"ledgerId": n}).encode(), {}) for n in range(count)])
    finally:
        producer.close()


@pytest.fixture
def world(pulsar_broker: PulsarLiteBroker, tmp_path: Path) -> Iterator[tuple[_AckFailsOn, MarkerKey,
                                                                          list[DeletionTopics]]]:
    run = uuid.uuid4().hex[:8]
    scope = [DeletionTopics.for_namespace(f"t{k}-{run}/ns", DeletionConfig()) for k in range(3)]
    client = _AckFailsOn(pulsar_broker.service_url, long_lived=False)
    with open_store(f"sqlite:///{tmp_path / 'metadata.db'}") as store:
        try:
            for topics in scope:
                client.ensure_subscription(topics.dlq, topics.dlq_subscription)
                _park(client, topics, 3)
            yield client, MarkerKey.ensure(store), scope
        finally:
            client.close()


def test_a_dlq_whose_ack_is_refused_is_settled_by_its_marker_and_acked_by_a_later_purge(
        world: tuple[_AckFailsOn, MarkerKey, list[DeletionTopics]], caplog: pytest.LogCaptureFixture) -> None:
    client, key, scope = world
    client.failing = scope[1].dlq
    refused = [e.message_id for e in list_dlq(client, [scope[1]], key)]
    assert len(purge(client, scope, key, Selection(everything=True))) == 9  # no error: every one is settled
    assert list_dlq(client, scope, key) == []
    assert any("refused their acknowledgement" in r.getMessage() and scope[1].dlq in r.getMessage()
               for r in caplog.records), caplog.text
    client.failing, client.acked = "", []
    assert purge(client, scope, key, Selection(everything=True)) == []
    assert set(refused) <= set(client.acked), "a later purge did not ack what the refused ack left"


def test_a_requeue_whose_ack_is_refused_sends_nothing_back_twice(
        world: tuple[_AckFailsOn, MarkerKey, list[DeletionTopics]]) -> None:
    client, key, scope = world
    client.failing = scope[1].dlq
    sent: list[str] = []

    class Publisher:
        def send_request_to(self, topics: DeletionTopics, request: object) -> str:
            sent.append(topics.dlq)
            return f"(1,{len(sent)},-1,-1)"

    for topics in scope:  # requests the requeue can decode
        producer = client.producer(topics.dlq)
        try:
            producer.send(json.dumps({"topicName": f"persistent://{topics.namespace}/orders",
                                      "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER",
                                      "ledgerId": 7, "markedAt": 1, "reason": "orphan"}).encode(), {})
        finally:
            producer.close()
    moved = requeue(client, scope, key, Publisher(), Selection(everything=True))  # type: ignore[arg-type]
    assert len(moved.moved) == 3 and sorted(sent) == sorted(t.dlq for t in scope)
    again = requeue(client, scope, key, Publisher(), Selection(everything=True))  # type: ignore[arg-type]
    assert again.moved == [] and len(sent) == 3, "a request whose ack was refused was sent back again"


def test_a_dlq_whose_marker_cannot_be_written_stops_no_other(
        world: tuple[_AckFailsOn, MarkerKey, list[DeletionTopics]]) -> None:
    client, key, scope = world
    client.failing, client.producing_fails = scope[1].dlq, True
    with pytest.raises(BrokerError) as raised:
        purge(client, scope, key, Selection(everything=True))
    said = str(raised.value)
    assert "1 of 3 DLQs could not be settled" in said and scope[1].dlq in said
    assert sorted(e.topic for e in list_dlq(client, scope, key)) == [scope[1].dlq] * 3
    # nothing selected there now but what stays: a DLQ with nothing selected only re-acks markers,
    # and its failure is no error
    client.failing, client.producing_fails = scope[0].dlq, False
    assert [e.topic for e in purge(client, [scope[0], scope[1]], key, Selection(message_ids=frozenset(
        e.message_id for e in list_dlq(client, [scope[1]], key))))] == [scope[1].dlq] * 3
    assert list_dlq(client, scope, key) == []
