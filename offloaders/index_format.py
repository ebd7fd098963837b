"""Readers for upstream's offload index formats, only as far as verification needs.

Upstream (``tiered-storage/jcloud`` and ``tiered-storage/file-system``) writes:

* per-ledger index ``<uuid>-ledger-<id>-index`` (``OffloadIndexBlockImpl``), big-endian:
  ``int magic 0xDE47DE47 | int blockLen | long dataObjectLen | long dataHeaderLen |
  int entryCount | int metadataLen | LedgerMetadataFormat bytes | entries...``.
  It holds the BookKeeper metadata of the source ledger (custom metadata with
  ``pulsar/managed-ledger``, ``lastEntryId``, ``length``, ``ctime``) but **not** the
  ledger id, so "belongs to this ledger" is judged from those fields;
* streaming segment index ``<uuid>-index`` (``OffloadIndexBlockV2Impl``):
  ``int magic 0x3D1FB0BC | int blockLen | long dataObjectLen | long dataHeaderLen``
  then per ledger ``long ledgerId | int entryCount | int metadataLen |
  LedgerInfo bytes | entries...`` -- this one names its ledgers;
* filesystem offload: a Hadoop MapFile directory ``<ledgerId>-<uuid>`` whose
  ``data`` SequenceFile starts with the record key ``-1`` holding the same
  ``LedgerMetadataFormat`` bytes.

The embedded protobuf messages are decoded with the project's own codecs in
:mod:`metastore.formats`, the same ones that read ledger znodes and
managed-ledger nodes.  This module only reads: whether what it read proves
anything is judged by the delete phase (``delete_phase/rules/verify_offload.py``),
and the writers for fixtures live in :mod:`deletion_service.testing`.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

from metastore.formats import FormatError
from metastore.formats.bk_ledger import decode_ledger_metadata_message
from metastore.formats.custom_metadata import MANAGED_LEDGER_KEY
from metastore.formats.managed_ledger import decode_ledger_info

INDEX_MAGIC_V1 = 0xDE47DE47
INDEX_MAGIC_V2 = 0x3D1FB0BC

#: Per-ledger index header: magic, blockLen, dataObjectLen, dataHeaderLen, entryCount, metadataLen.
INDEX_V1_HEADER = struct.Struct(">iiqqii")
#: Streaming index header: magic, blockLen, dataObjectLen, dataHeaderLen.
INDEX_V2_HEADER = struct.Struct(">iiqq")
#: Streaming index, per ledger: ledgerId, entryCount, metadataLen.
INDEX_V2_LEDGER = struct.Struct(">qii")
#: One index entry: entryId (long), partId (int), offset (long).
INDEX_ENTRY_SIZE = 8 + 4 + 8


class IndexFormatError(ValueError):
    """The bytes are not in the expected format."""


# --------------------------------------------------------------------------- protobuf


@dataclass(frozen=True, slots=True)
class SourceLedgerMetadata:
    """The fields of BookKeeper's ``LedgerMetadataFormat`` we compare."""

    length: int | None = None
    last_entry_id: int | None = None
    ctime_ms: int | None = None
    custom: dict[str, bytes] = field(default_factory=dict)

    @property
    def managed_ledger_name(self) -> str | None:
        raw = self.custom.get(MANAGED_LEDGER_KEY)
        return raw.decode("utf-8", "replace") if raw is not None else None


def parse_ledger_metadata_format(buf: bytes) -> SourceLedgerMetadata:
    """The bare ``LedgerMetadataFormat`` an index embeds; garbage is an :class:`IndexFormatError`."""
    try:
        meta = decode_ledger_metadata_message(buf)
    except FormatError as e:
        raise IndexFormatError(str(e)) from e
    return SourceLedgerMetadata(meta.length, meta.last_entry_id, meta.ctime, dict(meta.custom_metadata))


@dataclass(frozen=True, slots=True)
class SegmentLedgerInfo:
    """``LedgerInfo`` as stored per ledger in a streaming index: ledgerId=1, entries=2, size=3."""

    ledger_id: int
    entries: int | None
    size: int | None


def parse_ledger_info(buf: bytes) -> SegmentLedgerInfo:
    try:
        info = decode_ledger_info(buf)
    except FormatError as e:
        raise IndexFormatError(str(e)) from e
    return SegmentLedgerInfo(info.ledger_id, info.entries, info.size)


# --------------------------------------------------------------------------- index blocks


def parse_index_v1(buf: bytes) -> SourceLedgerMetadata:
    """Per-ledger index (``OffloadIndexBlockImpl``): return the embedded source metadata."""
    if len(buf) < INDEX_V1_HEADER.size:
        raise IndexFormatError(f"index too short ({len(buf)} bytes)")
    magic, _block_len, _data_len, _hdr_len, _count, meta_len = INDEX_V1_HEADER.unpack_from(buf)
    if magic & 0xFFFFFFFF != INDEX_MAGIC_V1:
        raise IndexFormatError(f"magic 0x{magic & 0xFFFFFFFF:08x}, expected 0x{INDEX_MAGIC_V1:08x}")
    start = INDEX_V1_HEADER.size
    if meta_len < 0 or start + meta_len > len(buf):
        raise IndexFormatError("segment metadata length out of range")
    return parse_ledger_metadata_format(buf[start:start + meta_len])


def parse_index_v2(buf: bytes) -> dict[int, SegmentLedgerInfo]:
    """Streaming index (``OffloadIndexBlockV2Impl``): ledger id -> its ``LedgerInfo``."""
    if len(buf) < INDEX_V2_HEADER.size:
        raise IndexFormatError(f"index too short ({len(buf)} bytes)")
    magic = INDEX_V2_HEADER.unpack_from(buf)[0] & 0xFFFFFFFF
    if magic != INDEX_MAGIC_V2:
        raise IndexFormatError(f"magic 0x{magic:08x}, expected 0x{INDEX_MAGIC_V2:08x}")
    pos = INDEX_V2_HEADER.size
    ledgers: dict[int, SegmentLedgerInfo] = {}
    while pos < len(buf):
        if pos + INDEX_V2_LEDGER.size > len(buf):
            raise IndexFormatError("truncated ledger header")
        ledger_id, count, meta_len = INDEX_V2_LEDGER.unpack_from(buf, pos)
        pos += INDEX_V2_LEDGER.size
        if meta_len < 0 or count < 0 or pos + meta_len + count * INDEX_ENTRY_SIZE > len(buf):
            raise IndexFormatError("ledger section out of range")
        info = parse_ledger_info(buf[pos:pos + meta_len])
        ledgers[ledger_id] = SegmentLedgerInfo(ledger_id, info.entries, info.size)
        pos += meta_len + count * INDEX_ENTRY_SIZE
    return ledgers


# --------------------------------------------------------------------------- SequenceFile


def _hadoop_vlong(buf: bytes, pos: int) -> tuple[int, int]:
    """``WritableUtils.readVLong``."""
    if pos >= len(buf):
        raise IndexFormatError("truncated vlong")
    first = struct.unpack_from(">b", buf, pos)[0]
    pos += 1
    if first >= -112:
        return first, pos
    negative = first < -120
    size = (-119 - first) if negative else (-111 - first)
    if pos + size - 1 > len(buf):
        raise IndexFormatError("truncated vlong")
    value = int.from_bytes(buf[pos:pos + size - 1], "big")
    pos += size - 1
    return (~value if negative else value), pos


def _hadoop_text(buf: bytes, pos: int) -> tuple[str, int]:
    size, pos = _hadoop_vlong(buf, pos)
    if size < 0 or pos + size > len(buf):
        raise IndexFormatError("truncated Text")
    return buf[pos:pos + size].decode("utf-8", "replace"), pos + size


def read_mapfile_metadata_record(buf: bytes) -> bytes | None:
    """The value of the first record of a MapFile ``data`` SequenceFile if its key is
    ``LongWritable(-1)`` (upstream's ``METADATA_KEY_INDEX``); None if the format is
    one we do not decode (block compression, a codec other than zlib)."""
    if buf[:3] != b"SEQ":
        raise IndexFormatError("not a Hadoop SequenceFile")
    if len(buf) < 4 or buf[3] < 6:
        return None
    pos = 4
    _key_class, pos = _hadoop_text(buf, pos)
    _val_class, pos = _hadoop_text(buf, pos)
    compressed, block = bool(buf[pos]), bool(buf[pos + 1])
    pos += 2
    codec = ""
    if compressed:
        codec, pos = _hadoop_text(buf, pos)
    (n_meta,) = struct.unpack_from(">i", buf, pos)
    pos += 4
    for _ in range(n_meta * 2):
        _s, pos = _hadoop_text(buf, pos)
    pos += 16  # sync marker
    if block or (compressed and codec != "org.apache.hadoop.io.compress.DefaultCodec"):
        return None
    rec_len, key_len = struct.unpack_from(">ii", buf, pos)
    pos += 8
    if rec_len == -1:  # sync escape before the first record
        pos += 16
        rec_len, key_len = struct.unpack_from(">ii", buf, pos)
        pos += 8
    if key_len != 8 or rec_len < key_len or pos + rec_len > len(buf):
        raise IndexFormatError("unexpected first record")
    (key,) = struct.unpack_from(">q", buf, pos)
    value = buf[pos + 8:pos + rec_len]
    if key != -1:
        raise IndexFormatError(f"first record key is {key}, expected -1 (ledger metadata)")
    if compressed:
        value = zlib.decompress(value)
    (size,) = struct.unpack_from(">i", value, 0)  # BytesWritable: int length + bytes
    return value[4:4 + size]
