"""Publish deletion requests, retries and dead letters — always with a subscription waiting.

A message sent to a topic nobody subscribes to is lost on a broker that
deletes unsubscribed data, so the subscription is created (at Earliest)
before the first send to each topic.  Sends are unbatched and wait for the
broker's receipt: a request counts as sent only once it is persisted.
"""

from __future__ import annotations

import threading

from deletion_service.broker.interface import BrokerClient, Producer
from deletion_service.model import PendingDeleteLedgerInfo, encode
from deletion_service.topics import DeletionTopics


class RequestPublisher:
    def __init__(self, broker: BrokerClient, topics: DeletionTopics) -> None:
        self.broker = broker
        self.topics = topics
        self._producers: dict[str, Producer] = {}
        self._lock = threading.Lock()

    def _producer(self, topic: str) -> Producer:
        with self._lock:
            producer = self._producers.get(topic)
            if producer is None:
                self.broker.ensure_subscription(topic, self.topics.subscription_for(topic))
                producer = self._producers[topic] = self.broker.producer(topic)
            return producer

    def prepare(self, *topics: str) -> None:
        """Create subscriptions and producers now, so the first publish is not the first contact."""
        for topic in topics:
            self._producer(topic)

    def send_request(self, request: PendingDeleteLedgerInfo) -> str:
        """To the request's partition; returns the message id once receipted."""
        return self._producer(self.topics.partition_for(request.ledger_id)).send(encode(request))

    def send_raw(self, topic: str, data: bytes) -> str:
        """Arbitrary bytes (the demo's garbled message; tests of the DLQ path)."""
        return self._producer(topic).send(data)

    def send_retry(self, data: bytes, properties: dict[str, str], delay_s: float) -> str:
        return self._producer(self.topics.retry).send(data, properties, deliver_after_s=delay_s)

    def send_dlq(self, data: bytes, properties: dict[str, str]) -> str:
        return self._producer(self.topics.dlq).send(data, properties)

    def close(self) -> None:
        with self._lock:
            for producer in self._producers.values():
                producer.close()
            self._producers.clear()
