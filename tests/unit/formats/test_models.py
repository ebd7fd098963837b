"""Managed-ledger, cursor and schema-locator models: round trips, bitsets, fidelity."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metastore.formats import (
    BatchDeletionIndex,
    CompressionType,
    FormatError,
    IndexEntry,
    LedgerInfo,
    ManagedCursorInfo,
    ManagedLedgerInfo,
    MessageRange,
    OffloadContext,
    OffloadSegment,
    Position,
    SchemaLocator,
    decode_cursor,
    decode_managed_ledger,
    decode_schema_locator,
    encode_cursor,
    encode_managed_ledger,
    encode_schema_locator,
)
from metastore.formats.cursor_info import bitset_to_indexes, indexes_to_bitset
from tests.support.protobuf_fields import f_int, f_len, varint

INT64 = st.integers(-(2**63), 2**63 - 1)
LEDGER_ID = st.integers(0, 2**63 - 1)
TEXT = st.text(max_size=8)
POSITION = st.builds(Position, LEDGER_ID, st.integers(-1, 2**63 - 1))
COMPRESSION = st.sampled_from(list(CompressionType))


def _opt(strategy: st.SearchStrategy) -> st.SearchStrategy:
    return st.none() | strategy


# A driver name of None means "no driverMetadata", which cannot carry properties.
DRIVER = st.just((None, {})) | st.tuples(TEXT, st.dictionaries(TEXT, TEXT, max_size=3))

SEGMENT = st.builds(
    lambda d, **kw: OffloadSegment(driver_name=d[0], driver_metadata=d[1], **kw),
    DRIVER,
    uid_msb=_opt(INT64),
    uid_lsb=_opt(INT64),
    complete=_opt(st.booleans()),
    assigned_timestamp=_opt(INT64),
    offloaded_timestamp=_opt(INT64),
    end_entry_id=_opt(INT64),
)
CONTEXT = st.builds(
    lambda d, **kw: OffloadContext(driver_name=d[0], driver_metadata=d[1], **kw),
    DRIVER,
    uid_msb=_opt(INT64),
    uid_lsb=_opt(INT64),
    complete=_opt(st.booleans()),
    bookkeeper_deleted=_opt(st.booleans()),
    timestamp=_opt(INT64),
    segments=st.lists(SEGMENT, max_size=2),
)
LEDGER = st.builds(
    LedgerInfo,
    ledger_id=LEDGER_ID,
    entries=_opt(INT64),
    size=_opt(INT64),
    timestamp=_opt(INT64),
    offload_context=_opt(CONTEXT),
)
MANAGED_LEDGER = st.builds(
    ManagedLedgerInfo,
    ledgers=st.lists(LEDGER, max_size=6),
    properties=st.dictionaries(TEXT, TEXT, max_size=3),
    terminated_position=_opt(POSITION),
    compression=COMPRESSION,
)
UNACKED = st.lists(st.integers(0, 400), unique=True, max_size=60).map(sorted)
CURSOR = st.builds(
    ManagedCursorInfo,
    cursors_ledger_id=st.just(-1) | LEDGER_ID,
    mark_delete=_opt(POSITION),
    individual_deleted_messages=st.lists(st.builds(MessageRange, POSITION, POSITION), max_size=4),
    properties=st.dictionaries(TEXT, INT64, max_size=3),
    cursor_properties=st.dictionaries(TEXT, TEXT, max_size=3),
    last_active=_opt(INT64),
    batched_entry_deletion_index_info=st.lists(st.builds(BatchDeletionIndex, POSITION, UNACKED), max_size=3),
    compression=COMPRESSION,
)
INDEX_ENTRY = st.builds(IndexEntry, INT64, POSITION, st.binary(max_size=32))


@settings(max_examples=150)
@given(MANAGED_LEDGER)
def test_managed_ledger_round_trip(info: ManagedLedgerInfo) -> None:
    assert decode_managed_ledger(encode_managed_ledger(info)) == info


@settings(max_examples=150)
@given(CURSOR)
def test_cursor_round_trip(info: ManagedCursorInfo) -> None:
    assert decode_cursor(encode_cursor(info)) == info


@given(st.builds(SchemaLocator, INDEX_ENTRY, st.lists(INDEX_ENTRY, max_size=4)))
def test_schema_locator_round_trip(locator: SchemaLocator) -> None:
    assert decode_schema_locator(encode_schema_locator(locator)) == locator


@given(UNACKED)
def test_bitset_round_trip(indexes: list[int]) -> None:
    words = indexes_to_bitset(indexes)
    assert all(-(2**63) <= w < 2**63 for w in words)
    assert not words or words[-1] != 0  # trimmed like BitSet.toLongArray()
    assert bitset_to_indexes(words) == indexes


def test_bitset_word_and_bit_order() -> None:
    # bit i is word i // 64, bit i % 64; bit 63 makes the signed word negative.
    assert indexes_to_bitset([0, 63, 64, 130]) == [1 - 2**63, 1, 4]
    assert bitset_to_indexes([-1]) == list(range(64))
    assert bitset_to_indexes([0, 0, 2]) == [129]
    with pytest.raises(FormatError, match="negative batch index"):
        indexes_to_bitset([-1])


def test_cursor_bitset_by_hand() -> None:
    # deleteSet written unpacked (proto2 default) and packed: both must read.
    position = f_len(1, f_int(1, 4) + f_int(2, 20))
    unpacked = f_len(7, position + f_int(2, -1) + f_int(2, 5))
    packed_words = bytes.fromhex("ffffffffffffffffff01") + b"\x05"
    packed = f_len(7, position + f_len(2, packed_words))
    for batch in (unpacked, packed):
        info = decode_cursor(f_int(1, 77) + batch + f_len(5, f_len(1, b"p") + f_int(2, -9)))
        assert info.cursors_ledger_id == 77 and not info.state_in_metadata_store
        assert info.mark_delete is None and info.last_active is None
        assert info.properties == {"p": -9}
        [entry] = info.batched_entry_deletion_index_info
        assert entry.position == (4, 20)
        assert entry.unacked == [*range(64), 64, 66]


def test_schema_locator_by_hand_and_ledger_ids() -> None:
    def entry(version: int, ledger: int, entry_id: int) -> bytes:
        return f_int(1, version) + f_len(2, f_int(1, ledger) + f_int(2, entry_id)) + f_len(3, b"h")

    data = f_len(1, entry(2, 2**63 - 1, 0)) + f_len(2, entry(0, 9, 1)) + f_len(2, entry(1, 2**63 - 1, 0))
    locator = decode_schema_locator(data)
    assert locator.info == IndexEntry(2, Position(2**63 - 1, 0), b"h")
    assert [e.version for e in locator.index] == [0, 1]
    assert locator.ledger_ids() == [9, 2**63 - 1]
    assert encode_schema_locator(locator) == data
    with pytest.raises(FormatError, match="SchemaLocator lacks required field"):
        decode_schema_locator(f_len(2, entry(0, 9, 1)))


def test_unknown_fields_survive_a_rewrite() -> None:
    """A newer broker's fields (e.g. LedgerInfo.properties = 6) must not be dropped by trim."""
    ctx = f_int(1, 5) + f_int(99, 1)
    first = f_int(1, 3) + f_len(5, ctx) + f_len(6, f_len(1, b"k") + f_len(2, b"v"))
    data = f_len(1, first) + f_len(1, f_int(1, 4) + f_int(6, 8)) + f_int(10, 42)
    info = decode_managed_ledger(data)
    assert info.unknown == f_int(10, 42)
    assert info.ledgers[0].unknown == f_len(6, f_len(1, b"k") + f_len(2, b"v"))
    assert info.ledgers[0].offload_context is not None
    assert info.ledgers[0].offload_context.unknown == f_int(99, 1)
    assert encode_managed_ledger(info) == data
    del info.ledgers[1]  # what the mark phase does
    again = decode_managed_ledger(encode_managed_ledger(info))
    assert again.unknown == f_int(10, 42) and again.ledgers == info.ledgers
    cursor = decode_cursor(f_int(1, -1) + f_int(20, 7))
    assert cursor.unknown == f_int(20, 7) and encode_cursor(cursor) == f_int(1, -1) + f_int(20, 7)


def test_unknown_fields_of_every_wire_type_keep_their_bytes_and_order() -> None:
    """Varint, fixed64, length-delimited, group and fixed32 fields we do not know, interleaved with
    known ones, come back byte for byte and in the order read (protobuf keeps them, not our code)."""
    fixed64 = varint(21 << 3 | 1) + bytes(range(8))
    group = varint(22 << 3 | 3) + f_int(1, 5) + f_len(2, b"x") + varint(22 << 3 | 4)
    fixed32 = varint(23 << 3 | 5) + b"\x01\x02\x03\x04"
    unknown = [f_int(20, 2**63), fixed64, group, f_len(300, b"abc"), fixed32]
    data = unknown[0] + f_int(1, -1 & (2**64 - 1)) + unknown[1] + unknown[2] + unknown[3] + unknown[4]
    cursor = decode_cursor(data)
    assert cursor.cursors_ledger_id == -1
    assert cursor.unknown == b"".join(unknown)
    assert decode_cursor(encode_cursor(cursor)).unknown == b"".join(unknown)


def test_empty_offload_context_stays_present() -> None:
    info = ManagedLedgerInfo(ledgers=[LedgerInfo(1, offload_context=OffloadContext())])
    assert decode_managed_ledger(encode_managed_ledger(info)).ledgers[0].offload_context == OffloadContext()
