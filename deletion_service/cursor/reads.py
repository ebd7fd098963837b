"""In-flight reads as objects, so a test can complete one at any point of a concurrent change.

A read captures, when it starts, the cursor epoch and each consumer's epoch;
its completion goes back to the dispatcher, which discards it if the cursor
epoch moved (PIP-269) and stamps its messages with the captured consumer
epochs (seek epoch).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from .log import Entry
from .position import Position
from .state import Consumer


class ReadKind(StrEnum):
    SEQUENTIAL = "sequential"  # from the read position; moves it on completion
    REPLAY = "replay"  # redelivery positions; never moves the read position


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message handed to a consumer, with the dispatcher generation it was delivered in.

    ``generation`` counts occasional changes *begun*, so a read that completes
    after a reset started is attributed to the post-reset stream — exactly where
    a stale delivery would hurt.
    """

    generation: int
    cursor_epoch: int
    consumer: str
    position: Position
    key: str | None
    kind: ReadKind
    delayed: bool = False


@dataclass(eq=False)
class InFlightRead:
    """A read issued to storage and not yet completed; call :meth:`complete` exactly once."""

    kind: ReadKind
    cursor_epoch: int
    entries: tuple[Entry, ...]
    consumer_epochs: dict[Consumer, int]  # per connection (not per name: a reconnect is a new one)
    _on_complete: Callable[[InFlightRead], list[Delivery]] = field(repr=False)
    done: bool = False
    discarded: bool = False

    @property
    def positions(self) -> list[Position]:
        return [e.position for e in self.entries]

    def complete(self) -> list[Delivery]:
        """Storage answered: hand the entries to the dispatcher; returns what was delivered."""
        if self.done:
            raise RuntimeError("read completed twice")
        self.done = True
        return self._on_complete(self)
