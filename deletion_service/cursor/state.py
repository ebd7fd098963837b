"""The dispatcher's own state that an occasional read position change must reset with the cursor.

Three pieces (PIP-269 footnote [3]): the redelivery set (replay reads), the
delayed-message tracker, and Key_Shared's recently-joined consumers.  They are
plain containers; :mod:`.dispatcher` changes them only between
``start_increase_epoch`` and ``end_increase_epoch`` when the cursor moves, which
is what makes the change atomic.  Also the broker-side :class:`Consumer`.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from .position import Position
from .seek import ClientConsumer, ConsumerEpoch, Message


class RedeliverySet:
    """Positions to replay, sorted (Pulsar's ``redeliveryMessages``)."""

    def __init__(self) -> None:
        self._positions: list[Position] = []

    def add(self, position: Position) -> None:
        i = bisect.bisect_left(self._positions, position)
        if i == len(self._positions) or self._positions[i] != position:
            self._positions.insert(i, position)

    def remove(self, position: Position) -> None:
        i = bisect.bisect_left(self._positions, position)
        if i < len(self._positions) and self._positions[i] == position:
            del self._positions[i]

    def first(self, n: int) -> list[Position]:
        return self._positions[:n]

    def clear(self) -> None:
        self._positions.clear()

    def __contains__(self, position: object) -> bool:
        return position in self._positions

    def __len__(self) -> int:
        return len(self._positions)

    def __iter__(self):  # noqa: ANN204 - a plain iterator over positions
        return iter(list(self._positions))


class DelayedTracker:
    """Delayed messages not yet due: position → delivery time."""

    def __init__(self) -> None:
        self._due: dict[Position, float] = {}

    def add(self, position: Position, deliver_at: float) -> None:
        self._due[position] = deliver_at

    def pop_due(self, now: float, n: int) -> list[Position]:
        due = sorted(p for p, t in self._due.items() if t <= now)[:n]
        for p in due:
            del self._due[p]
        return due

    def clear(self) -> None:
        self._due.clear()

    def __contains__(self, position: object) -> bool:
        return position in self._due

    def __len__(self) -> int:
        return len(self._due)


@dataclass(frozen=True, slots=True)
class JoinedAt:
    """A recently joined consumer's max read position and the cursor epoch it was taken in."""

    max_read_position: Position
    epoch: int


class RecentlyJoined:
    """Key_Shared: consumers that may only get entries below the read position they joined at."""

    def __init__(self) -> None:
        self._joined: dict[str, JoinedAt] = {}

    def add(self, consumer: str, max_read_position: Position, epoch: int) -> None:
        self._joined[consumer] = JoinedAt(max_read_position, epoch)

    def get(self, consumer: str) -> JoinedAt | None:
        return self._joined.get(consumer)

    def remove(self, consumer: str) -> None:
        self._joined.pop(consumer, None)

    def release_up_to(self, first_unacked: Position) -> None:
        """Everything before ``first_unacked`` is acked: consumers whose max is at or below it are free."""
        for name in [n for n, j in self._joined.items() if j.max_read_position <= first_unacked]:
            del self._joined[name]

    def clear(self) -> None:
        self._joined.clear()

    def items(self) -> list[tuple[str, JoinedAt]]:
        return list(self._joined.items())

    def __len__(self) -> int:
        return len(self._joined)


@dataclass(eq=False)
class Consumer:
    """A broker-side consumer: its epoch, its unacked deliveries and its client end."""

    client: ClientConsumer
    epoch: ConsumerEpoch = field(default_factory=ConsumerEpoch)
    pending: set[Position] = field(default_factory=set)
    #: The epoch this connection subscribed with: what a read begun before it joined carries to it.
    joined_epoch: int = 0
    #: Flow permits (messages it may still be sent); None for a consumer outside flow control.
    permits: int | None = None

    def can_take(self) -> bool:
        """Any permit left: as in Pulsar, a batch may then overdraw them (so a batch bigger
        than a consumer's whole window is still delivered, never starved)."""
        return self.permits is None or self.permits > 0

    @property
    def name(self) -> str:
        return self.client.name

    def send(self, message: Message) -> None:
        """Hand over ``message``; it costs a permit per message the client will show (PIP-54: the
        batch's acked indexes are filtered by the client, so their permits are given back)."""
        if self.permits is not None:
            self.permits -= message.batch_size - len(message.ack_set)
        self.pending.add(message.position)
        self.client.on_message(message)
