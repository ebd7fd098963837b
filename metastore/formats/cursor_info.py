"""ManagedCursorInfo: a cursor node (child of the managed-ledger node), as dataclasses.

The cursor's mark-delete position and acknowledged ranges decide which ledgers
a subscription still needs.  Batch-index acks are kept as a ``java.util.BitSet``
serialised with ``toLongArray()``: word ``i // 64``, bit ``i % 64``, words as
*signed* int64, and a **set bit means the index is still unacked**.  We expose
that as a sorted list of unacked indexes so nobody re-derives the bit order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from .compression import CompressionType
from .compression import decode as unwrap
from .compression import encode as wrap
from .errors import FormatError
from .generated import managed_ledger_pb2 as pb
from .position import Position
from .protobuf_codec import merge_unknown, opt, parse, serialize, set_opt, unknown_bytes

_WHAT = "cursor node"
_WORD = 64
_MASK = (1 << _WORD) - 1

#: ``cursors_ledger_id`` of a cursor whose state lives in the metadata store itself.
NO_CURSOR_LEDGER = -1


class MessageRange(NamedTuple):
    """An individually deleted range, open-closed ``(lower, upper]`` as in Pulsar's RangeSet."""

    lower: Position
    upper: Position


class BatchDeletionIndex(NamedTuple):
    """Batch-index ack state of one entry: the sorted indexes inside it not yet acknowledged."""

    position: Position
    unacked: list[int]


@dataclass
class ManagedCursorInfo:
    """The whole cursor node; ``mark_delete``/``last_active`` are ``None`` when absent."""

    cursors_ledger_id: int
    mark_delete: Position | None = None
    individual_deleted_messages: list[MessageRange] = field(default_factory=list)
    properties: dict[str, int] = field(default_factory=dict)
    cursor_properties: dict[str, str] = field(default_factory=dict)
    last_active: int | None = None
    batched_entry_deletion_index_info: list[BatchDeletionIndex] = field(default_factory=list)
    compression: CompressionType = CompressionType.NONE
    unknown: bytes = b""

    @property
    def state_in_metadata_store(self) -> bool:
        """True when the node is the truth (no cursor ledger holds a newer state)."""
        return self.cursors_ledger_id == NO_CURSOR_LEDGER


def bitset_to_indexes(words: list[int]) -> list[int]:
    """Set bits of a ``BitSet.toLongArray()`` (signed words) as sorted indexes."""
    out: list[int] = []
    for w, word in enumerate(words):
        bits = word & _MASK
        while bits:
            low = bits & -bits
            out.append(w * _WORD + low.bit_length() - 1)
            bits ^= low
    return out


def indexes_to_bitset(indexes: list[int]) -> list[int]:
    """Inverse of :func:`bitset_to_indexes`; trailing zero words trimmed like ``toLongArray``."""
    words: list[int] = []
    for index in indexes:
        if index < 0:
            raise FormatError(f"{_WHAT}: negative batch index {index}")
        w, bit = divmod(index, _WORD)
        if w >= len(words):
            words.extend([0] * (w + 1 - len(words)))
        words[w] |= 1 << bit
    return [word - (1 << _WORD) if word >> (_WORD - 1) else word for word in words]


def _pos(msg: pb.NestedPositionInfo) -> Position:
    return Position(msg.ledgerId, msg.entryId)


def _set_pos(msg: pb.NestedPositionInfo, position: Position) -> None:
    msg.ledgerId, msg.entryId = position


def cursor_from_proto(payload: bytes) -> ManagedCursorInfo:
    """Decode the plain protobuf (no compression envelope)."""
    msg = parse(pb.ManagedCursorInfo, payload, _WHAT)
    mark_delete = None
    if msg.HasField("markDeleteLedgerId"):  # Pulsar reads the entry id with default 0
        mark_delete = Position(msg.markDeleteLedgerId, msg.markDeleteEntryId)
    return ManagedCursorInfo(
        cursors_ledger_id=msg.cursorsLedgerId,
        mark_delete=mark_delete,
        individual_deleted_messages=[
            MessageRange(_pos(r.lowerEndpoint), _pos(r.upperEndpoint)) for r in msg.individualDeletedMessages
        ],
        properties={p.name: p.value for p in msg.properties},
        cursor_properties={p.name: p.value for p in msg.cursorProperties},
        last_active=opt(msg, "lastActive"),
        batched_entry_deletion_index_info=[
            BatchDeletionIndex(_pos(b.position), bitset_to_indexes(list(b.deleteSet)))
            for b in msg.batchedEntryDeletionIndexInfo
        ],
        unknown=unknown_bytes(msg),
    )


def cursor_to_proto(info: ManagedCursorInfo) -> bytes:
    """Encode as the plain protobuf (no compression envelope)."""
    msg = pb.ManagedCursorInfo(cursorsLedgerId=info.cursors_ledger_id)
    if info.mark_delete is not None:
        msg.markDeleteLedgerId, msg.markDeleteEntryId = info.mark_delete
    for rng in info.individual_deleted_messages:
        item = msg.individualDeletedMessages.add()
        _set_pos(item.lowerEndpoint, rng.lower)
        _set_pos(item.upperEndpoint, rng.upper)
    for name, value in info.properties.items():
        msg.properties.add(name=name, value=value)
    set_opt(msg, "lastActive", info.last_active)
    for batch in info.batched_entry_deletion_index_info:
        item = msg.batchedEntryDeletionIndexInfo.add()
        _set_pos(item.position, batch.position)
        item.deleteSet.extend(indexes_to_bitset(batch.unacked))
    for name, text in info.cursor_properties.items():
        msg.cursorProperties.add(name=name, value=text)
    merge_unknown(msg, info.unknown)
    return serialize(msg, _WHAT)


def decode_cursor(data: bytes) -> ManagedCursorInfo:
    """Decode a cursor node as stored (with or without the 0x4778 envelope)."""
    payload, compression = unwrap(data, "cursor")
    info = cursor_from_proto(payload)
    info.compression = compression
    return info


def encode_cursor(info: ManagedCursorInfo) -> bytes:
    """Encode for storage, compressed the way ``info.compression`` says."""
    return wrap(cursor_to_proto(info), info.compression, "cursor")
