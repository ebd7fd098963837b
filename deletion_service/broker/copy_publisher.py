"""What the delete phase needs of a publisher: RETRY and DLQ copies of the messages it received.

A ``Protocol``, not :class:`deletion_service.publisher.RequestPublisher` itself, because the
worker's disposition tests hand it a publisher that refuses a send exactly when they say (a
real broker does not fail on demand).  That fake declares this contract, so the type checker
holds both to the same signatures: a publisher method the worker starts calling, or a changed
parameter, fails the check instead of passing the fake's tests by accident of duck typing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from deletion_service.broker.interface import BrokerError, Outgoing


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
