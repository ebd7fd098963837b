"""Individually acknowledged entries above the mark-delete position, and batch-index acks (PIP-54).

Kept as Pulsar keeps them: one bitmap of acked entry ids per ledger (a
roaring bitmap here, as Pulsar's ``OpenLongPairRangeSet`` keeps a bitset per
ledger), not a Python object per range.  A million scattered acks then cost
bytes per range, not hundreds, and the persisted ``(lower, upper]`` ranges are
derived from the bitmaps only when the cursor is saved.

Batch-index acks keep, per partly acked entry, the bitmap of indexes still
*unacked* (the persisted ``BitSet`` has the same polarity); once every index is
acked the entry is acked as a whole and its batch state goes away.

A node may hold a range that spans ledgers (``(L1:E, L2:F]``): Pulsar's range
set does not produce one, but nothing forbids it in the format.  We cannot
turn it into per-ledger bits without the ledger list, so it is kept as read
(:attr:`AckState._spans`), honoured by :meth:`AckState.is_acked` and written
back unchanged.

Entry ids must fit in 32 bits, as in Pulsar's range set (a ledger rolls over
long before); a bigger one is refused with ``ValueError`` rather than mangled.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from pyroaring import BitMap

from metastore.formats import BatchDeletionIndex, MessageRange

from . import ack_size
from .position import Position

_MAX_ENTRY = (1 << 32) - 1


class AckState:
    """Acked entries per ledger, plus partly acked batches; not thread-safe (the cursor locks)."""

    __slots__ = ("_ledgers", "_batch", "_spans", "_last_ledger", "_last_bitmap")

    def __init__(self, ranges: Iterable[MessageRange] | None = None,
                 batch_indexes: Iterable[BatchDeletionIndex] | None = None) -> None:
        self._ledgers: dict[int, BitMap] = {}
        self._batch: dict[Position, BitMap] = {}
        self._spans: list[MessageRange] = []
        self._last_ledger: int | None = None  # the ledger acked last: its bitmap, found without a dict lookup
        self._last_bitmap: BitMap | None = None
        for lower, upper in ranges or ():
            self._add_range(Position(*lower), Position(*upper))
        for position, unacked in batch_indexes or ():
            position = Position(*position)
            if not self.is_acked(position):
                self._batch[position] = _indexes(unacked, "batch index")

    # ---- the public API

    def ack(self, position: Position) -> None:
        """Acknowledge the whole entry (any batch-index state for it goes)."""
        ledger_id, entry_id = position
        bitmap = self._last_bitmap if ledger_id == self._last_ledger else self._bitmap(ledger_id)
        try:
            bitmap.add(entry_id)  # type: ignore[union-attr]
        except OverflowError:
            raise ValueError(f"entry id {entry_id} of {position} is outside 0..{_MAX_ENTRY}") from None
        if self._batch:
            self._batch.pop(position, None)

    def ack_batch_index(self, position: Position, batch_size: int, indexes: Iterable[int]) -> bool:
        """Acknowledge ``indexes`` of the batch at ``position``; True once the whole entry is acked."""
        if batch_size < 1:
            raise ValueError(f"batch size of {position} must be at least 1, got {batch_size}")
        acked = _indexes(indexes, "batch index")
        if acked and acked.max() >= batch_size:
            raise ValueError(f"batch index {acked.max()} of {position} is outside 0..{batch_size - 1}")
        position = Position(*position)
        if self.is_acked(position):
            return True
        unacked = self._batch.get(position)
        if unacked is None:
            unacked = self._batch[position] = BitMap()
            unacked.add_range(0, batch_size)
        unacked.difference_update(acked)
        if unacked:
            return False
        self.ack(position)
        return True

    def is_acked(self, position: Position) -> bool:
        """True only when the whole entry is acked (a partly acked batch is not)."""
        ledger_id, entry_id = position
        bitmap = self._ledgers.get(ledger_id)
        if bitmap is not None and 0 <= entry_id <= _MAX_ENTRY and entry_id in bitmap:
            return True
        return bool(self._spans) and any(lower < position <= upper for lower, upper in self._spans)

    def unacked_batch_indexes(self, position: Position) -> frozenset[int] | None:
        """The indexes of a partly acked batch not yet acked; None when no index of it is acked alone."""
        unacked = self._batch.get(Position(*position))
        return frozenset(unacked) if unacked is not None else None

    def acked_batch_indexes(self, position: Position, batch_size: int) -> frozenset[int]:
        """What dispatch carries as ``ack_set``: the indexes of the batch already acked."""
        unacked = self._batch.get(Position(*position))
        if unacked is None:
            return frozenset()
        return frozenset(i for i in range(batch_size) if i not in unacked)

    def encoded_size(self) -> int:
        """Bytes the persisted ack state takes in the cursor node (ranges and batch-index entries)."""
        return (sum(ack_size.ledger_ranges(ledger_id, bitmap) for ledger_id, bitmap in self._ledgers.items())
                + sum(ack_size.message_range(r) for r in self._spans)
                + sum(ack_size.batch_entry(p, u) for p, u in self._batch.items()))

    # ---- the persisted view

    def ranges(self) -> list[MessageRange]:
        """Every acked range ``(lower, upper]``, sorted (derived from the bitmaps: O(ranges))."""
        return sorted([*self._spans, *(r for ledger_id in self._ledgers for r in self.ledger_ranges(ledger_id))])

    def ledger_ranges(self, ledger_id: int) -> Iterator[MessageRange]:
        """One ledger's acked ranges, in order."""
        bitmap = self._ledgers.get(ledger_id)
        if not bitmap:
            return
        starts, ends = ack_size.run_bounds(bitmap)
        for start, end in zip(starts, ends, strict=True):
            yield MessageRange(Position(ledger_id, start - 1), Position(ledger_id, end))

    def batch_indexes(self) -> list[BatchDeletionIndex]:
        return [BatchDeletionIndex(p, list(u)) for p, u in sorted(self._batch.items())]

    def ledger_ids(self) -> list[int]:
        return sorted(self._ledgers)

    def ledger_bitmap(self, ledger_id: int) -> BitMap:
        """A copy of one ledger's acked entry ids (a copy: the state's own must change only through acks)."""
        return BitMap(self._ledgers.get(ledger_id, ()))

    @property
    def spans(self) -> list[MessageRange]:
        """Ranges read from a node that span ledgers, kept as read."""
        return list(self._spans)

    def batch_entries(self) -> list[tuple[Position, BitMap]]:
        return sorted(self._batch.items())

    def __len__(self) -> int:
        """The number of acked ranges (what Pulsar counts as unacked ranges to persist)."""
        return len(self._spans) + sum(ack_size.run_count(b) for b in self._ledgers.values())

    def acked_count(self) -> int:
        """Entries acked individually (not counting cross-ledger spans, whose size needs the ledger list)."""
        return sum(len(b) for b in self._ledgers.values())

    # ---- what the cursor does to it

    def clear(self) -> None:
        """Forget every individual and batch-index ack (reset-cursor does this, as Pulsar)."""
        self._ledgers.clear()
        self._batch.clear()
        self._spans.clear()
        self._last_ledger = self._last_bitmap = None

    def trim_to(self, mark_delete: Position) -> None:
        """Drop what the mark-delete position already covers."""
        md_ledger, md_entry = mark_delete
        for ledger_id in [lid for lid in self._ledgers if lid <= md_ledger]:
            bitmap = self._ledgers[ledger_id]
            if ledger_id < md_ledger:
                bitmap.clear()
            elif md_entry >= 0:
                bitmap.remove_range(0, min(md_entry, _MAX_ENTRY) + 1)
            if not bitmap:
                del self._ledgers[ledger_id]
                if ledger_id == self._last_ledger:
                    self._last_ledger = self._last_bitmap = None
        self._spans = [MessageRange(max(lower, mark_delete), upper)
                       for lower, upper in self._spans if upper > mark_delete]
        if self._batch:
            self._batch = {p: u for p, u in self._batch.items() if p > mark_delete}

    # ---- internals

    def _bitmap(self, ledger_id: int) -> BitMap:
        bitmap = self._ledgers.get(ledger_id)
        if bitmap is None:
            bitmap = self._ledgers[ledger_id] = BitMap()
        self._last_ledger, self._last_bitmap = ledger_id, bitmap
        return bitmap

    def _add_range(self, lower: Position, upper: Position) -> None:
        if upper <= lower:
            return  # empty: nothing is acked by it
        if lower.ledger_id != upper.ledger_id:
            self._spans.append(MessageRange(lower, upper))
            self._spans.sort()
            return
        first, last = lower.entry_id + 1, upper.entry_id
        if first < 0 or last > _MAX_ENTRY:
            raise ValueError(f"acked range ({lower}, {upper}] is outside entry ids 0..{_MAX_ENTRY}")
        self._bitmap(upper.ledger_id).add_range(first, last + 1)
        for position in [p for p in self._batch if lower < p <= upper]:
            del self._batch[position]


def _indexes(values: Iterable[int], what: str) -> BitMap:
    try:
        return BitMap(values)
    except (OverflowError, TypeError, ValueError):
        raise ValueError(f"{what}es must be integers in 0..{_MAX_ENTRY}") from None
