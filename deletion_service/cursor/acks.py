"""Individually acknowledged positions above the mark-delete position.

Kept as Pulsar keeps them, a set of disjoint open-closed ranges ``(lower, upper]``
that merge only within a ledger (Pulsar's ``RangeSet`` of ``(L, E-1], (L, E]``
ranges), so a node read from ZooKeeper round-trips unchanged even though we do
not know the ledger list.  Batch-index acks (PIP-54) and the persistence size
budget are a later issue: they attach here, beside the ranges.
"""

from __future__ import annotations

import bisect

from metastore.formats import BatchDeletionIndex, MessageRange

from .position import Position, predecessor


class AckState:
    """Disjoint, sorted open-closed ranges of acknowledged entries; not thread-safe (the cursor locks)."""

    def __init__(self, ranges: list[MessageRange] | None = None,
                 batch_indexes: list[BatchDeletionIndex] | None = None) -> None:
        self._ranges: list[MessageRange] = []
        self._batch: dict[Position, list[int]] = {}
        for rng in ranges or []:
            self._add(MessageRange(Position(*rng.lower), Position(*rng.upper)))
        #: PIP-54 batch-index state as read (unacked indexes per entry); kept opaque until that issue.
        self._batch = {Position(*b.position): list(b.unacked) for b in batch_indexes or []}

    def ranges(self) -> list[MessageRange]:
        return list(self._ranges)

    def batch_indexes(self) -> list[BatchDeletionIndex]:
        return [BatchDeletionIndex(p, list(u)) for p, u in sorted(self._batch.items())]

    def __len__(self) -> int:
        return len(self._ranges)

    def is_acked(self, position: Position) -> bool:
        i = bisect.bisect_left(self._ranges, position, key=lambda r: r.upper)
        return i < len(self._ranges) and self._ranges[i].lower < position <= self._ranges[i].upper

    def ack(self, position: Position) -> None:
        self._add(MessageRange(predecessor(position), position))

    def clear(self) -> None:
        """Forget every individual and batch-index ack (reset-cursor does this, as Pulsar)."""
        self._ranges.clear()
        self._batch.clear()

    def trim_to(self, mark_delete: Position) -> None:
        """Drop what the mark-delete position already covers."""
        kept = []
        for rng in self._ranges:
            if rng.upper <= mark_delete:
                continue
            kept.append(MessageRange(max(rng.lower, mark_delete), rng.upper) if rng.lower < mark_delete else rng)
        self._ranges = kept
        self._batch = {p: u for p, u in self._batch.items() if p > mark_delete and not self.is_acked(p)}

    def _add(self, new: MessageRange) -> None:
        lower, upper = new
        merged: list[MessageRange] = []
        for rng in self._ranges:
            same_ledger = rng.upper.ledger_id == upper.ledger_id or rng.lower.ledger_id == lower.ledger_id
            if same_ledger and rng.lower <= upper and lower <= rng.upper:
                lower, upper = min(lower, rng.lower), max(upper, rng.upper)
            else:
                merged.append(rng)
        bisect.insort(merged, MessageRange(lower, upper))
        self._ranges = merged
        self._batch = {p: u for p, u in self._batch.items() if not (lower < p <= upper)}
