"""The 0x4778 compression envelope: hand-built nodes, round trips, refusals.

Hand-built means: the protobuf payload written field by field with
``tests/support/protobuf_fields.py``, the envelope packed with ``struct`` and compressed with each
library directly -- nothing from our encoder -- so a symmetric bug in our
encoder and decoder cannot hide.
"""

from __future__ import annotations

import contextlib
import re
import struct
import zlib

import lz4.block
import pytest
import snappy
import zstandard
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from metastore.formats import (
    CompressionType,
    FormatError,
    LedgerInfo,
    ManagedLedgerInfo,
    decode_cursor,
    decode_managed_ledger,
    encode_managed_ledger,
)
from metastore.formats import compression as envelope
from tests.support.protobuf_fields import f_int, f_len

MAX_ID = 2**63 - 1


def hand_managed_ledger() -> bytes:
    """ledgers 7 (3 entries) and 2**63-1 (open), property k=v, terminated at (7, 2)."""
    return (
        f_len(1, f_int(1, 7) + f_int(2, 3) + f_int(3, 300) + f_int(4, 1_700_000_000_000))
        + f_len(1, f_int(1, MAX_ID) + f_int(4, 0))
        + f_len(2, f_int(1, 7) + f_int(2, 2))
        + f_len(3, f_len(1, b"k") + f_len(2, b"v"))
    )


RAW_COMPRESS = {
    CompressionType.NONE: lambda b: b,
    CompressionType.LZ4: lambda b: lz4.block.compress(b, store_size=False),
    CompressionType.ZLIB: zlib.compress,
    CompressionType.ZSTD: lambda b: zstandard.ZstdCompressor().compress(b),
    CompressionType.SNAPPY: snappy.compress,
}


def envelope_by_hand(payload: bytes, compression: int, size: int | None = None, body: bytes | None = None):
    meta = f_int(1, compression) + f_int(2, len(payload) if size is None else size)
    if body is None:
        body = RAW_COMPRESS[CompressionType(compression)](payload)
    return struct.pack(">HI", 0x4778, len(meta)) + meta + body


@pytest.mark.parametrize("compression", list(CompressionType))
def test_hand_built_envelope_decodes(compression: CompressionType) -> None:
    info = decode_managed_ledger(envelope_by_hand(hand_managed_ledger(), compression))
    assert info.compression is compression
    assert info.ledger_ids() == [7, MAX_ID]
    assert info.ledgers[0] == LedgerInfo(7, entries=3, size=300, timestamp=1_700_000_000_000)
    assert info.ledgers[1].entries is None  # absent stays absent
    assert info.properties == {"k": "v"}
    assert info.terminated_position == (7, 2)


def test_plain_protobuf_has_no_envelope() -> None:
    info = decode_managed_ledger(hand_managed_ledger())
    assert info.compression is CompressionType.NONE
    assert encode_managed_ledger(info) == hand_managed_ledger()
    assert decode_managed_ledger(b"") == ManagedLedgerInfo()  # a fresh managed ledger's node


@pytest.mark.parametrize("compression", list(CompressionType))
def test_round_trip_each_compression(compression: CompressionType) -> None:
    ledgers = [LedgerInfo(i, entries=i % 100, size=i * 10, timestamp=1_700_000_000 + i) for i in range(5000)]
    info = ManagedLedgerInfo(ledgers=ledgers, properties={"a": "b"}, compression=compression)
    data = encode_managed_ledger(info)
    assert decode_managed_ledger(data) == info
    assert data.startswith(b"\x47\x78") is (compression is not CompressionType.NONE)
    if compression is not CompressionType.NONE:  # and the library reads back what we wrote
        payload, kind = envelope.decode(data, "managed-ledger")
        assert kind is compression and len(data) < len(payload)


@pytest.mark.parametrize("compression", list(CompressionType))
def test_cursor_envelope_by_hand(compression: CompressionType) -> None:
    payload = f_int(1, -1) + f_int(2, 5) + f_int(3, 6)
    info = decode_cursor(envelope_by_hand(payload, compression))
    assert (info.cursors_ledger_id, info.mark_delete, info.compression) == (-1, (5, 6), compression)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x47\x78\x00\x00", "truncated compression header"),
        (struct.pack(">HI", 0x4778, 100) + b"\x08\x01", "runs past the end"),
        (envelope_by_hand(b"abc", 9, body=b"abc"), "unknown compression type 9"),
        (envelope_by_hand(b"abc", -1, body=b"abc"), "unknown compression type -1"),
        (struct.pack(">HI", 0x4778, 2) + b"\x08\x01" + b"x", "lacks required field(s) uncompressedSize"),
        (struct.pack(">HI", 0x4778, 3) + b"\xff\xff\xff", "compression metadata"),
        (envelope_by_hand(b"", 3, size=10, body=b"not zstd at all"), "ZSTD payload does not decompress"),
        (envelope_by_hand(b"", 2, size=10, body=b"not zlib"), "ZLIB payload does not decompress"),
        (envelope_by_hand(b"", 4, size=10, body=b"\xff\xff\xff"), "SNAPPY payload does not decompress"),
        (envelope_by_hand(b"", 1, size=10, body=b"\xff\xff\xff"), "LZ4 payload does not decompress"),
        (envelope_by_hand(b"x" * 50, 2, body=zlib.compress(b"x" * 50)[:-3]), "ZLIB stream is truncated"),
        (envelope_by_hand(b"x" * 50, 2, size=49), "more than the header's uncompressedSize 49"),
        (envelope_by_hand(b"x", 0, size=-5), "negative uncompressedSize"),
        (b"\xff\xff\xff\xff", "not a valid ManagedLedgerInfo"),
        (f_len(1, f_int(2, 3)), "lacks required field(s) ledgerInfo[0].ledgerId"),
    ],
)
def test_bad_managed_ledger_nodes(data: bytes, message: str) -> None:
    with pytest.raises(FormatError, match=re.escape(message)):
        decode_managed_ledger(data)


@pytest.mark.parametrize("compression", list(CompressionType))
@pytest.mark.parametrize("delta", [-3, 5])
def test_decompressed_size_mismatch(compression: CompressionType, delta: int) -> None:
    payload = hand_managed_ledger()
    data = envelope_by_hand(payload, compression, size=len(payload) + delta)
    # LZ4 cannot even decompress into a too-small buffer; the others produce the real size.
    with pytest.raises(FormatError, match="the header's uncompressedSize|does not decompress"):
        decode_managed_ledger(data)


def test_cursor_missing_required_field() -> None:
    with pytest.raises(FormatError, match="cursor node: ManagedCursorInfo lacks required field"):
        decode_cursor(f_int(2, 5))


def test_trailing_bytes_after_zlib_stream_refused() -> None:
    payload = hand_managed_ledger()
    with pytest.raises(FormatError, match="extra bytes"):
        decode_managed_ledger(envelope_by_hand(payload, 2, body=zlib.compress(payload) + b"junk"))


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_garbage_is_decoded_or_refused_cleanly(data: bytes) -> None:
    for decode in (decode_managed_ledger, decode_cursor):
        with contextlib.suppress(FormatError):  # anything else escaping is the bug
            decode(data)


@settings(max_examples=200)
@given(st.sampled_from(list(CompressionType)), st.binary(max_size=300))
def test_envelope_round_trip_any_payload(compression: CompressionType, payload: bytes) -> None:
    # A plain payload starting with the magic cannot be told from an envelope; protobuf never does.
    assume(compression is not CompressionType.NONE or not payload.startswith(b"\x47\x78"))
    for kind in ("managed-ledger", "cursor"):
        assert envelope.decode(envelope.encode(payload, compression, kind), kind) == (payload, compression)
