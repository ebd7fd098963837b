"""Several consumers behind one :class:`Consumer`: how a namespace-scope daemon reads every namespace.

Why a group and not one consumer over every topic: namespaces appear while the
daemon runs, and a Pulsar consumer's topics are fixed when it subscribes.  Each
refresh adds one consumer for the new namespaces' topics; the worker keeps
seeing one consumer, and an ack goes to the consumer that delivered the message
(found by its topic, which the broker names).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from deletion_service.broker.interface import BrokerError, Consumer, Received


class ConsumerGroup(Consumer):
    def __init__(self, consumers: Iterable[tuple[Iterable[str], Consumer]] = ()) -> None:
        self._members: list[Consumer] = []
        self._by_topic: dict[str, Consumer] = {}
        self._next = 0
        self._lock = threading.Lock()
        for topics, consumer in consumers:
            self.add(topics, consumer)

    def add(self, topics: Iterable[str], consumer: Consumer) -> None:
        with self._lock:
            self._members.append(consumer)
            for topic in topics:
                self._by_topic[topic] = consumer

    @property
    def topics(self) -> list[str]:
        with self._lock:
            return list(self._by_topic)

    def receive(self, timeout_s: float) -> Received | None:
        """Round-robin over the members, so one busy namespace cannot starve the others."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                members = list(self._members)
            if not members:
                return None
            for _ in range(len(members)):
                self._next = (self._next + 1) % len(members)
                msg = members[self._next].receive(0.001 if len(members) > 1 else max(0.001, timeout_s))
                if msg is not None:
                    return msg
            if len(members) == 1 or time.monotonic() >= deadline:
                return None
            time.sleep(min(0.01, max(0.0, deadline - time.monotonic())))

    def ack(self, message: Received) -> None:
        with self._lock:
            owner = self._by_topic.get(message.topic)
        if owner is None:
            raise BrokerError(f"no consumer of this group reads {message.topic}")
        owner.ack(message)

    @property
    def redelivers_on_request(self) -> bool:
        with self._lock:
            return all(m.redelivers_on_request for m in self._members)

    def redeliver_unacked(self) -> None:
        with self._lock:
            members = list(self._members)
        for consumer in members:
            consumer.redeliver_unacked()

    def close(self) -> None:
        with self._lock:
            members, self._members = self._members, []
            self._by_topic.clear()
        for consumer in members:
            consumer.close()
