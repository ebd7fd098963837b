"""A purge over many DLQs settles every DLQ it can: one whose acknowledgement fails keeps its selected
requests listed and is named in the one error, and the others are settled all the same.

The failure is injected (acknowledging one DLQ raises): on pulsar-lite a tenant produces it for real by
holding enough consumers on its own DLQ's subscription to take every consumer id the command would use
(about 1,600 consumers, and the command then waits out its timeouts for most of a minute)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest

from deletion_service.broker.interface import BrokerError, Outgoing
from deletion_service.broker.pulsar_client import PulsarBrokerClient
from deletion_service.config import DeletionConfig
from deletion_service.dlq.marker import MarkerKey
from deletion_service.dlq.operations import Selection, list_dlq, purge
from deletion_service.protocol.topics import DeletionTopics
from metastore import open_store
from tests.support.harness import PulsarLiteBroker


class _AckFailsOn(PulsarBrokerClient):
    """The real client, whose acknowledgements on one DLQ fail (the injected fault)."""

    failing = ""

    def acknowledge(self, topic: str, subscription: str, message_ids: Sequence[str],
                    likely_acked: Sequence[str] = ()) -> None:
        if topic == self.failing:
            raise BrokerError(f"cannot subscribe {subscription} on {topic}: TimeOut")
        super().acknowledge(topic, subscription, message_ids, likely_acked)


def _park(client: PulsarBrokerClient, topics: DeletionTopics, count: int) -> None:
    producer = client.producer(topics.dlq)
    try:
        producer.send_many([Outgoing(json.dumps({"ledgerId": n}).encode(), {}) for n in range(count)])
    finally:
        producer.close()


def test_a_dlq_that_cannot_be_acked_stops_no_other(pulsar_broker: PulsarLiteBroker, tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    scope = [DeletionTopics.for_namespace(f"t{k}-{run}/ns", DeletionConfig()) for k in range(3)]
    client = _AckFailsOn(pulsar_broker.service_url, long_lived=False)
    with open_store(f"sqlite:///{tmp_path / 'metadata.db'}") as store:
        key = MarkerKey.ensure(store)
        try:
            for topics in scope:
                client.ensure_subscription(topics.dlq, topics.dlq_subscription)
                _park(client, topics, 3)
            client.failing = scope[1].dlq
            with pytest.raises(BrokerError) as raised:
                purge(client, scope, key, Selection(everything=True))
            said = str(raised.value)
            assert "1 of 3 DLQs could not be settled" in said and scope[1].dlq in said
            assert sorted(e.topic for e in list_dlq(client, scope, key)) == [scope[1].dlq] * 3
            # nothing selected there now but what stays: a DLQ with nothing selected only re-acks markers,
            # and its failure is no error
            client.failing = scope[0].dlq
            assert [e.topic for e in purge(client, [scope[0], scope[1]], key,
                                           Selection(message_ids=frozenset(
                                               e.message_id for e in list_dlq(client, [scope[1]], key))))] \
                == [scope[1].dlq] * 3
            assert list_dlq(client, scope, key) == []
        finally:
            client.close()
