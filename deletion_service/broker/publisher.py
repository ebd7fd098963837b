"""Publish deletion requests, retries and dead letters — always with a subscription waiting.

A message sent to a topic nobody subscribes to is lost on a broker that
deletes unsubscribed data, so the subscription is created (at Earliest)
before the first send to each topic.  Sends are unbatched and wait for the
broker's receipt: a request counts as sent only once it is persisted.

The ``send_many``/``send_requests`` forms pipeline (many messages in flight,
every partition at once) and return each message's receipt or error in the
input order, never raising for a broker failure: callers such as ``trim`` must
know exactly which requests were receipted.

:class:`CopyPublisher` is what the delete phase needs of a publisher (RETRY and DLQ copies of
the messages it received): a ``Protocol``, because the worker's disposition tests hand it a
publisher that refuses a send exactly when they say (a real broker does not fail on demand).
That fake declares this contract, so the type checker holds both to the same signatures.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Protocol

from deletion_service.broker.interface import BrokerClient, BrokerError, Outgoing, Producer
from deletion_service.protocol.request import PendingDeleteLedgerInfo, encode
from deletion_service.protocol.topics import NAMESPACE_TOPIC, DeletionTopics, beside, namespace_of_topic


def route(request: PendingDeleteLedgerInfo, topics: DeletionTopics, namespace_scope: bool,
          namespace_known: Callable[[str], bool] | None = None) -> DeletionTopics:
    """Where a new request goes (see :meth:`RequestPublisher.topics_for`); ``enqueue --dry-run`` shows it.

    Namespace scope: the namespace's own topic, unless ``namespace_known`` says the cluster has no such
    namespace (an orphan of a deleted one): daemons serve only the namespaces they find, so it would sit
    there unread.  Then the cluster's topics, which unrestricted daemons drain."""
    if not namespace_scope:
        return topics
    namespace = namespace_of_topic(request.topic_name)
    if namespace_known is not None and not namespace_known(namespace):
        return topics
    return beside(f"persistent://{namespace}/{NAMESPACE_TOPIC}", topics)


class RequestPublisher:
    def __init__(self, broker: BrokerClient, topics: DeletionTopics, namespace_scope: bool = False,
                 namespace_known: Callable[[str], bool] | None = None) -> None:
        self.broker = broker
        self.topics = topics
        #: requests go to their topic's namespace's own request topic (ledgerDeletionTopicScope = namespace)
        self.namespace_scope = namespace_scope
        #: whether the cluster has a namespace (see :func:`route`); None: every namespace is taken to exist
        self.namespace_known = namespace_known
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

    def topics_for(self, request: PendingDeleteLedgerInfo) -> DeletionTopics:
        """Where a *new* request goes: the cluster's topics, or (namespace scope) its topic's namespace's.

        Routing by the request's own ``topicName`` is right only for the mark phase and the
        operator's ``enqueue``, which make the request: the namespace it lands in is the one it names,
        and the daemon checks exactly that.  A request read back from somewhere (a DLQ) is a claim,
        and goes back where it was read (:meth:`send_request_to`), never where it says."""
        return route(request, self.topics, self.namespace_scope, self.namespace_known)

    def send_request(self, request: PendingDeleteLedgerInfo) -> str:
        """To the request's partition; returns the message id once receipted."""
        return self._producer(self.topics_for(request).partition_for(request.ledger_id)).send(encode(request))

    def send_request_to(self, topics: DeletionTopics, request: PendingDeleteLedgerInfo) -> str:
        """To the request's partition of ``topics`` (a requeue's origin), whatever its ``topicName`` says."""
        return self._producer(topics.partition_for(request.ledger_id)).send(encode(request))

    def send_requests(self, requests: Sequence[PendingDeleteLedgerInfo]) -> list[str | BrokerError]:
        """Each request to its partition (grouped per partition producer, pipelined), results in the input order.

        All partitions go to the broker client together (``BrokerClient.send_batches``), so every
        partition has a window in flight at once.  Within a partition the order is kept, so
        duplicates of one ledger still meet in order.  A partition whose producer cannot be had
        fails its own requests only."""
        by_topic: dict[str, list[int]] = defaultdict(list)
        for index, request in enumerate(requests):
            by_topic[self.topics_for(request).partition_for(request.ledger_id)].append(index)
        results: list[str | BrokerError] = [BrokerError("not sent")] * len(requests)
        batches: list[tuple[Producer, list[Outgoing]]] = []
        sending: list[list[int]] = []
        for topic, indexes in by_topic.items():
            try:
                producer = self._producer(topic)
            except BrokerError as e:
                for index in indexes:
                    results[index] = e
                continue
            batches.append((producer, [Outgoing(encode(requests[i])) for i in indexes]))
            sending.append(indexes)
        for indexes, answers in zip(sending, self.broker.send_batches(batches), strict=True):
            for index, answer in zip(indexes, answers, strict=True):
                results[index] = answer
        return results

    def send_many(self, topic: str, messages: Sequence[Outgoing]) -> list[str | BrokerError]:
        """To one topic (RETRY/DLQ), pipelined.  A topic that cannot be prepared (its subscription
        or producer) fails each of its messages with that reason instead of raising."""
        try:
            producer = self._producer(topic)
        except BrokerError as e:
            return [e] * len(messages)
        return producer.send_many(messages)

    def send_raw(self, topic: str, data: bytes) -> str:
        """Arbitrary bytes (the demo's garbled message; tests of the DLQ path)."""
        return self._producer(topic).send(data)

    def _beside(self, source_topic: str | None) -> DeletionTopics:
        """The topics a copy goes back to: those of the topic its original came from (namespace scope)."""
        return self.topics if source_topic is None else beside(source_topic, self.topics)

    def send_retry(self, data: bytes, properties: dict[str, str], delay_s: float,
                   source_topic: str | None = None) -> str:
        return self._producer(self._beside(source_topic).retry).send(data, properties, deliver_after_s=delay_s)

    def send_dlq(self, data: bytes, properties: dict[str, str], source_topic: str | None = None) -> str:
        return self._producer(self._beside(source_topic).dlq).send(data, properties)

    def _send_beside(self, copies: Sequence[Outgoing], dlq: bool) -> list[str | BrokerError]:
        """Each copy to the RETRY (or DLQ) beside the topic its original came from, pipelined per topic."""
        by_topic: dict[str, list[int]] = defaultdict(list)
        for i, copy in enumerate(copies):
            topics = self._beside(copy.source_topic)
            by_topic[topics.dlq if dlq else topics.retry].append(i)
        results: list[str | BrokerError] = [BrokerError("not sent")] * len(copies)
        for topic, indexes in by_topic.items():
            for i, answer in zip(indexes, self.send_many(topic, [copies[i] for i in indexes]), strict=True):
                results[i] = answer
        return results

    def send_retries(self, copies: Sequence[Outgoing]) -> list[str | BrokerError]:
        """A batch's RETRY copies, pipelined; each one's receipt or why it failed."""
        return self._send_beside(copies, dlq=False)

    def send_dead_letters(self, copies: Sequence[Outgoing]) -> list[str | BrokerError]:
        """A batch's DLQ copies, pipelined; each one's receipt or why it failed."""
        return self._send_beside(copies, dlq=True)

    def close(self) -> None:
        with self._lock:
            for producer in self._producers.values():
                producer.close()
            self._producers.clear()


class CopyPublisher(Protocol):
    """Sends a received message's copy to the RETRY or DLQ topic beside the one it came from
    (``source_topic``; ``None``: the publisher's own topics), waiting for the broker's receipt."""

    def send_retry(self, data: bytes, properties: dict[str, str], delay_s: float,
                   source_topic: str | None = None) -> str:
        """One RETRY copy, delivered after ``delay_s``; its message id once receipted, else BrokerError."""
        ...

    def send_dlq(self, data: bytes, properties: dict[str, str], source_topic: str | None = None) -> str:
        """One DLQ copy; its message id once receipted, else BrokerError."""
        ...

    def send_retries(self, copies: Sequence[Outgoing]) -> list[str | BrokerError]:
        """A batch's RETRY copies, in order: each one's message id or why it failed (never raises)."""
        ...

    def send_dead_letters(self, copies: Sequence[Outgoing]) -> list[str | BrokerError]:
        """A batch's DLQ copies, in order: each one's message id or why it failed (never raises)."""
        ...
