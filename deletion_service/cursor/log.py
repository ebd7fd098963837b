"""An in-memory managed ledger: the entries a dispatcher reads, for tests and simulations.

It stands in for BookKeeper reads so the dispatcher can be replayed
deterministically.  Entries carry a key (Key_Shared routing), an optional
delivery time (delayed messages) and a batch size (a batch entry holds that
many messages, each acked by its index under PIP-54).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from .position import Position


@dataclass(frozen=True, slots=True)
class Entry:
    position: Position
    key: str | None = None
    deliver_at: float | None = None
    batch_size: int = 1


class EntryLog:
    """Ledgers of entries, in position order; append-only like a managed ledger."""

    def __init__(self) -> None:
        self._positions: list[Position] = []
        self._entries: dict[Position, Entry] = {}

    @classmethod
    def of(cls, ledgers: dict[int, int], key: str | None = None) -> EntryLog:
        """A log with ``{ledger_id: entry_count}``; every entry gets ``key``."""
        log = cls()
        for ledger_id in sorted(ledgers):
            for entry_id in range(ledgers[ledger_id]):
                log.append(Position(ledger_id, entry_id), key=key)
        return log

    def append(self, position: Position, key: str | None = None, deliver_at: float | None = None,
               batch_size: int = 1) -> Entry:
        if self._positions and position <= self._positions[-1]:
            raise ValueError(f"{position} is not after the last entry {self._positions[-1]}")
        if batch_size < 1:
            raise ValueError(f"batch size of {position} must be at least 1, got {batch_size}")
        entry = Entry(Position(*position), key, deliver_at, batch_size)
        self._positions.append(entry.position)
        self._entries[entry.position] = entry
        return entry

    def entry(self, position: Position) -> Entry:
        return self._entries[position]

    def positions(self, start: Position | None = None) -> list[Position]:
        """Every position, or those at or after ``start``."""
        return list(self._positions) if start is None else self._positions[bisect.bisect_left(self._positions, start):]

    def next_valid(self, position: Position) -> Position | None:
        """The first existing position at or after ``position`` (``None`` past the end)."""
        i = bisect.bisect_left(self._positions, position)
        return self._positions[i] if i < len(self._positions) else None

    def read(self, start: Position, max_entries: int) -> list[Entry]:
        """Up to ``max_entries`` entries from the first existing position at or after ``start``."""
        i = bisect.bisect_left(self._positions, start)
        return [self._entries[p] for p in self._positions[i:i + max_entries]]

    @property
    def last_position(self) -> Position | None:
        return self._positions[-1] if self._positions else None
