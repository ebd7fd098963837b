"""The seek epoch (PIP "seek command add epoch"): a consumer-side fence for seeks.

The cursor epoch protects the broker's read position; the consumer epoch
protects what the *application* sees.  ``seek`` bumps the client's epoch before
the command leaves, the broker's consumer adopts it (only bigger ones), every
dispatched message carries the consumer epoch of the read that produced it, and
the client drops messages older than its epoch — including those already in its
receive queue.  A reconnect starts a fresh broker-side consumer that takes the
client's epoch (the only time an epoch is set rather than raised), and the
client clears its queue, as the Java client does.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from .position import Position


@dataclass(frozen=True, slots=True)
class Message:
    """What the broker sends (``CommandMessage``): position, key, the epochs of its read and, for a
    batch, its size and the indexes already acked (``ack_set``, PIP-54), which the client skips."""

    position: Position
    consumer_epoch: int
    cursor_epoch: int
    key: str | None = None
    batch_size: int = 1
    ack_set: frozenset[int] = frozenset()

    @property
    def visible_indexes(self) -> list[int]:
        """The batch's messages the application gets: those not acked already."""
        return [i for i in range(self.batch_size) if i not in self.ack_set]


@dataclass(frozen=True, slots=True)
class SeekCommand:
    """``CommandSeek`` with ``consumer_epoch``."""

    consumer_epoch: int
    position: Position


class ConsumerEpoch:
    """The broker-side consumer epoch: raised only by a bigger seek epoch, set on reconnect."""

    def __init__(self, value: int = 0) -> None:
        self._value = value
        self._lock = threading.Lock()

    @property
    def value(self) -> int:
        with self._lock:
            return self._value

    def advance(self, epoch: int) -> bool:
        """Adopt ``epoch`` from a seek if bigger; a stale or replayed seek is refused."""
        with self._lock:
            if epoch <= self._value:
                return False
            self._value = epoch
            return True

    def reset(self, epoch: int) -> None:
        """A reconnect: the new broker-side consumer starts at the epoch the client subscribes with."""
        with self._lock:
            self._value = epoch


class ClientConsumer:
    """The client side: receive queue, current epoch, and the filter (``filter_enabled`` for tests)."""

    def __init__(self, name: str, filter_enabled: bool = True) -> None:
        self.name = name
        self.epoch = 0
        self.filter_enabled = filter_enabled
        self.dropped: list[Message] = []
        self._queue: deque[Message] = deque()
        self._lock = threading.Lock()

    def seek(self, position: Position) -> SeekCommand:
        """Raise the epoch first, so nothing read before this call is handed out after it."""
        with self._lock:
            self.epoch += 1
            return SeekCommand(self.epoch, Position(*position))

    def on_message(self, message: Message) -> None:
        with self._lock:
            self._queue.append(message)

    def receive(self) -> Message | None:
        """Next message for the application, skipping those from before the last seek."""
        with self._lock:
            while self._queue:
                message = self._queue.popleft()
                if self.filter_enabled and (message.consumer_epoch < self.epoch or not message.visible_indexes):
                    self.dropped.append(message)
                    continue
                return message
            return None

    def receive_all(self) -> list[Message]:
        out = []
        while (message := self.receive()) is not None:
            out.append(message)
        return out

    def reconnected(self) -> int:
        """The connection was re-established: old in-flight messages are gone; returns the epoch to subscribe with."""
        with self._lock:
            self._queue.clear()
            return self.epoch
