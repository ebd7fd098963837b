"""Exact byte sizes of the ack state as the cursor node encodes it, without encoding it.

Why closed forms: the persist budget has to know what a million ranges would
take before choosing which to keep, and building a million protobuf messages
to find out costs seconds.  A range of ledger ``L`` covering entries
``s..e`` is one ``MessageRange`` (field 4 of ``ManagedCursorInfo``) of two
``NestedPositionInfo`` ``(L, s-1)`` and ``(L, e)``: ``10 + 2·len(L) + len(s-1)
+ len(e)`` bytes, where ``len`` is the varint length of an int64 (10 for a
negative one, so ``s = 0`` costs 10).  Summed over a ledger by counting a
bitmap's values between powers of 128, which roaring does in C.
``tests/unit/cursor/test_ack_state.py`` checks every formula against the real encoder.
"""

from __future__ import annotations

from pyroaring import BitMap

from metastore.formats import MessageRange, Position
from metastore.formats.cursor_info import indexes_to_bitset

_NEGATIVE = 10  # an int64 below zero is a 10-byte varint
_ROARING_END = 1 << 32
_LIMITS = [1 << (7 * k) for k in range(1, 10)]  # a varint of k bytes holds values below _LIMITS[k-1]


def varint_len(value: int) -> int:
    if value < 0:
        return _NEGATIVE
    for k, limit in enumerate(_LIMITS, start=1):
        if value < limit:
            return k
    return 10


def run_bounds(bitmap: BitMap) -> tuple[BitMap, BitMap]:
    """The first and the last value of every run of consecutive values, as two bitmaps of equal length."""
    return bitmap.difference(bitmap.shift(1)), bitmap.difference(bitmap.shift(-1))


def run_count(bitmap: BitMap) -> int:
    return len(bitmap.difference(bitmap.shift(1)))


def _sum_varint_len(values: BitMap, offset: int) -> int:
    """``Σ varint_len(v - offset)`` over ``values`` (all ``>= offset`` except a negative one per below)."""
    total, low = 0, offset
    for k, limit in enumerate(_LIMITS[:5], start=1):  # entry ids are below 2^32: at most 5 bytes
        high = min(limit + offset, _ROARING_END)  # roaring counts nothing past its 32-bit end
        total += k * values.range_cardinality(low, high)
        low = high
    return total


def _nested(ledger_id: int, entry_id: int) -> int:
    return 2 + varint_len(ledger_id) + varint_len(entry_id)


def _field(body: int) -> int:
    """A length-delimited field with a one-byte tag."""
    return 1 + varint_len(body) + body


def message_range(rng: MessageRange) -> int:
    lower, upper = rng
    return _field(_field(_nested(*lower)) + _field(_nested(*upper)))


def ledger_ranges(ledger_id: int, acked: BitMap) -> int:
    """Bytes of all of one ledger's ranges: each run of acked entries ``s..e`` is ``(L:s-1, L:e]``."""
    if not acked:
        return 0
    starts, ends = run_bounds(acked)
    count = len(starts)
    first_is_zero = 0 in starts
    lowers = _sum_varint_len(starts, 1) + (_NEGATIVE if first_is_zero else 0)  # lower entry is s - 1
    uppers = _sum_varint_len(ends, 0)
    return count * (10 + 2 * varint_len(ledger_id)) + lowers + uppers


def batch_entry(position: Position, unacked: BitMap) -> int:
    """One ``BatchedEntryDeletionIndexInfo``: the position and the unacked indexes as BitSet words."""
    words = indexes_to_bitset(list(unacked))
    body = _field(_nested(*position)) + sum(1 + varint_len(w) for w in words)
    return _field(body)
