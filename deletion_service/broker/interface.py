"""What the protocol needs from a Pulsar broker: send with a receipt, receive, ack.

Kept this small on purpose: the embedded pulsar-lite and a real cluster differ
in what they support (no delayed delivery, no admin REST, unreliable negative
acks on pulsar-lite), so the protocol only uses what both do reliably and
implements delays itself.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


class BrokerError(Exception):
    """The broker could not be reached or refused an operation: transient for the protocol."""


def display_message_id(message_id: str) -> str:
    """A message id as operators read and type it: ``L:E`` (Pulsar's ``ledgerId:entryId``), with
    ``:P`` for a partition and ``:P:B`` for a batch index only when there is one.  Accepts the
    client's text form ``(L,E,P,B)``; anything else is returned as it is."""
    parts = message_id.strip("()").split(",")
    if len(parts) != 4 or not all(p.lstrip("-").isdigit() for p in parts):
        return message_id
    ledger, entry, partition, batch = parts
    if batch != "-1":
        return f"{ledger}:{entry}:{partition}:{batch}"
    return f"{ledger}:{entry}" + (f":{partition}" if partition != "-1" else "")


def parse_message_id(text: str) -> tuple[int, int, int, int]:
    """(ledger, entry, partition, batch index) from ``L:E[:P[:B]]`` or the client's ``(L,E,P,B)``;
    ``ValueError`` names the expected form."""
    parts = text.strip("()").replace(",", ":").split(":")
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        numbers = []
    if not 2 <= len(numbers) <= 4:
        raise ValueError(f"message id {text!r} is not LEDGER:ENTRY (as 'dlq list' prints it)")
    return (*numbers, *([-1] * (4 - len(numbers))))  # type: ignore[return-value]


@dataclass
class Received:
    """One received message; ``handle`` is the client's own object, used to ack."""

    data: bytes
    properties: dict[str, str]
    topic: str
    message_id: str
    publish_time_ms: int
    handle: Any = field(repr=False, default=None)


@dataclass(frozen=True)
class Outgoing:
    """One message to send."""

    data: bytes
    properties: dict[str, str] = field(default_factory=dict)
    deliver_after_s: float = 0.0
    #: for a RETRY/DLQ copy: the topic its original was received on (the broker's word), which
    #: names the RETRY/DLQ it goes to; None: the publisher's own topics
    source_topic: str | None = None


class Producer(abc.ABC):
    @abc.abstractmethod
    def send(self, data: bytes, properties: dict[str, str] | None = None, deliver_after_s: float = 0) -> str:
        """Send and wait for the broker's receipt; returns the message id as text."""

    def send_many(self, messages: Sequence[Outgoing]) -> list[str | BrokerError]:
        """Each message's receipt (message id as text) or why it failed, in order. Not abstract: the
        default sends one at a time, catching BrokerError per message.

        Results rather than an exception because callers decide per message: trim keeps listed
        exactly the ledgers whose requests failed, and must know which of the others were receipted.
        A client that can keep many messages in flight overrides this (one round trip per window
        instead of one per message)."""
        results: list[str | BrokerError] = []
        for message in messages:
            try:
                results.append(self.send(message.data, message.properties, message.deliver_after_s))
            except BrokerError as e:
                results.append(e)
        return results

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

    @property
    def redelivers_on_request(self) -> bool:
        """Whether :meth:`redeliver_unacked` works here (a consumer that cannot ask leaves nothing unacked
        on purpose)."""
        return False

    def redeliver_unacked(self) -> None:
        """Ask the broker to deliver again every message this consumer received and has not acked,
        those still in hand included (the caller recognises them)."""
        raise BrokerError("this consumer cannot ask for its unacked messages again")


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

    def send_batches(self, batches: Sequence[tuple[Producer, Sequence[Outgoing]]]) -> list[list[str | BrokerError]]:
        """Several producers' messages at once: for each batch, what its producer's ``send_many``
        answers (each message's receipt or why it failed, in order).

        Why next to ``Producer.send_many``: a request batch spans every partition, and a client that
        can keep all partitions' windows in flight from one thread beats one thread per partition
        (measured on pulsar-client: about twice the messages per second, the handoffs between
        threads costing more than the round trips they overlap).  The default goes producer by producer."""
        return [producer.send_many(messages) for producer, messages in batches]

    def read_all(self, topic: str) -> list[Received]:
        """Every message stored on ``topic`` now, oldest first and each once (a broker may deliver one
        twice to a reader), read without any subscription: nothing is acked, nothing is held from
        other readers or consumers (a Pulsar Reader).  Messages that arrive while reading are not
        waited for.  Not abstract: a client without readers says so."""
        raise BrokerError(f"{type(self).__name__} cannot read {topic} without consuming it")

    def acknowledge(self, topic: str, subscription: str, message_ids: Sequence[str],
                    likely_acked: Sequence[str] = ()) -> None:
        """Ack exactly these messages (ids as :func:`display_message_id` or ``Received.message_id``
        spell them) on ``subscription``, and no other; messages it may receive meanwhile go back.
        ``likely_acked``: more to ack, probably acked already (so never dispatched again): not waited for."""
        raise BrokerError(f"{type(self).__name__} cannot acknowledge messages by id")

    @abc.abstractmethod
    def partitions(self, topic: str) -> int:
        """Number of partitions of ``topic`` (0 for a non-partitioned topic)."""

    def keeps_partition_metadata(self) -> bool:
        """Whether :meth:`partitions` is the truth.  pulsar-lite keeps no partitioned-topic metadata
        (partitions are plain topics named ``…-partition-N``), so it answers 0 for every topic."""
        return True

    @abc.abstractmethod
    def close(self) -> None: ...
