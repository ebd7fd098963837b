"""What the protocol needs from a Pulsar broker: send with a receipt, receive, ack.

Kept this small on purpose: the embedded pulsar-lite and a real cluster differ
in what they support (no delayed delivery, no admin REST, unreliable negative
acks on pulsar-lite), so the protocol only uses what both do reliably and
implements delays itself.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any


class BrokerError(Exception):
    """The broker could not be reached or refused an operation: transient for the protocol."""


@dataclass
class Received:
    """One received message; ``handle`` is the client's own object, used to ack."""

    data: bytes
    properties: dict[str, str]
    topic: str
    message_id: str
    publish_time_ms: int
    handle: Any = field(repr=False, default=None)


class Producer(abc.ABC):
    @abc.abstractmethod
    def send(self, data: bytes, properties: dict[str, str] | None = None, deliver_after_s: float = 0) -> str:
        """Send and wait for the broker's receipt; returns the message id as text."""

    @abc.abstractmethod
    def close(self) -> None: ...


class Consumer(abc.ABC):
    @abc.abstractmethod
    def receive(self, timeout_s: float) -> Received | None:
        """The next message, or ``None`` when none arrived within ``timeout_s``."""

    @abc.abstractmethod
    def ack(self, message: Received) -> None: ...

    @abc.abstractmethod
    def close(self) -> None:
        """Unacked messages go back to the subscription for redelivery."""


class BrokerClient(abc.ABC):
    @abc.abstractmethod
    def producer(self, topic: str) -> Producer:
        """An unbatched producer (so backlog counts requests)."""

    @abc.abstractmethod
    def consumer(self, topics: list[str], subscription: str, receiver_queue_size: int = 1000) -> Consumer:
        """A Shared consumer over ``topics``, starting at the earliest message for a new subscription."""

    @abc.abstractmethod
    def ensure_subscription(self, topic: str, subscription: str) -> None:
        """Create ``subscription`` on ``topic`` (at Earliest) if missing, so nothing is sent to no one."""

    @abc.abstractmethod
    def partitions(self, topic: str) -> int:
        """Number of partitions of ``topic`` (0 for a non-partitioned topic)."""

    @abc.abstractmethod
    def close(self) -> None: ...
