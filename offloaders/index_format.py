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

The embedded protobuf messages are decoded (and, for fixtures, encoded) with
the project's own codecs in :mod:`metastore.formats`, the same ones that read
ledger znodes and managed-ledger nodes.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

from metastore.formats import FormatError, LedgerInfo, LedgerMetadata, Segment
from metastore.formats.bk_ledger import decode_ledger_metadata_message, encode_ledger_metadata_message
from metastore.formats.managed_ledger import decode_ledger_info
from metastore.formats.managed_ledger import encode_ledger_info as encode_ledger_info_message
from offloaders.interface import IndexCheck, IndexExpectation, OffloadIndexMismatchError, Verification

INDEX_MAGIC_V1 = 0xDE47DE47
INDEX_MAGIC_V2 = 0x3D1FB0BC
#: jclouds lower-cases user metadata; upstream's ``DataBlockUtils.METADATA_FORMAT_VERSION_KEY``.
FORMAT_VERSION_KEY = "s3managedledgeroffloaderformatversion"
CURRENT_FORMAT_VERSION = "1"
ML_NAME_KEY = "pulsar/managed-ledger"
#: Upstream passes ``ManagedLedgerName`` as extra metadata to every offload; jclouds lower-cases it.
OBJECT_ML_NAME_KEY = "managedledgername"

_HEADER_V1 = struct.Struct(">iiqqii")
_HEADER_V2 = struct.Struct(">iiqq")
_LEDGER_V2 = struct.Struct(">qii")
_ENTRY = 8 + 4 + 8


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
        raw = self.custom.get(ML_NAME_KEY)
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
    if len(buf) < _HEADER_V1.size:
        raise IndexFormatError(f"index too short ({len(buf)} bytes)")
    magic, _block_len, _data_len, _hdr_len, _count, meta_len = _HEADER_V1.unpack_from(buf)
    if magic & 0xFFFFFFFF != INDEX_MAGIC_V1:
        raise IndexFormatError(f"magic 0x{magic & 0xFFFFFFFF:08x}, expected 0x{INDEX_MAGIC_V1:08x}")
    start = _HEADER_V1.size
    if meta_len < 0 or start + meta_len > len(buf):
        raise IndexFormatError("segment metadata length out of range")
    return parse_ledger_metadata_format(buf[start:start + meta_len])


def parse_index_v2(buf: bytes) -> dict[int, SegmentLedgerInfo]:
    """Streaming index (``OffloadIndexBlockV2Impl``): ledger id -> its ``LedgerInfo``."""
    if len(buf) < _HEADER_V2.size:
        raise IndexFormatError(f"index too short ({len(buf)} bytes)")
    magic = _HEADER_V2.unpack_from(buf)[0] & 0xFFFFFFFF
    if magic != INDEX_MAGIC_V2:
        raise IndexFormatError(f"magic 0x{magic:08x}, expected 0x{INDEX_MAGIC_V2:08x}")
    pos = _HEADER_V2.size
    ledgers: dict[int, SegmentLedgerInfo] = {}
    while pos < len(buf):
        if pos + _LEDGER_V2.size > len(buf):
            raise IndexFormatError("truncated ledger header")
        ledger_id, count, meta_len = _LEDGER_V2.unpack_from(buf, pos)
        pos += _LEDGER_V2.size
        if meta_len < 0 or count < 0 or pos + meta_len + count * _ENTRY > len(buf):
            raise IndexFormatError("ledger section out of range")
        info = parse_ledger_info(buf[pos:pos + meta_len])
        ledgers[ledger_id] = SegmentLedgerInfo(ledger_id, info.entries, info.size)
        pos += meta_len + count * _ENTRY
    return ledgers


def build_index_v1(meta_format: bytes, entries: int = 0) -> bytes:
    """An index block in upstream's layout (for tests and fixtures)."""
    body = meta_format + b"".join(struct.pack(">qiq", i, i + 1, 0) for i in range(entries))
    total = _HEADER_V1.size + len(body)
    return _HEADER_V1.pack(INDEX_MAGIC_V1 - (1 << 32), total, 0, 0, entries, len(meta_format)) + body


def build_index_v2(ledgers: dict[int, bytes]) -> bytes:
    """A streaming index with the given ledger id -> ``LedgerInfo`` bytes (no entries)."""
    body = b"".join(_LEDGER_V2.pack(lid, 0, len(info)) + info for lid, info in ledgers.items())
    return _HEADER_V2.pack(INDEX_MAGIC_V2, _HEADER_V2.size + len(body), 0, 0) + body


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


# --------------------------------------------------------------------------- judging


def judge_source_metadata(meta: SourceLedgerMetadata, ledger_id: int, name: str,
                          expect: IndexExpectation | None, fallback_ml_name: str | None,
                          object_ml_name: str | None = None) -> IndexCheck:
    """Compare a per-ledger index's embedded metadata with what the caller expects.

    A contradiction raises.  VERIFIED needs the managed ledger the index names
    (its embedded ``pulsar/managed-ledger``, else the ``ManagedLedgerName`` user
    metadata upstream stamps on the objects) to equal the expected one: entries,
    size or ctime agreeing prove nothing about whose data this is.  An index that
    names no managed ledger is UNVERIFIABLE, and unverifiable is never deleted."""
    expect = expect or IndexExpectation()
    compared: list[str] = []
    problems: list[str] = []

    want_ml = expect.managed_ledger_name or fallback_ml_name
    have_ml = meta.managed_ledger_name or object_ml_name
    if meta.managed_ledger_name and object_ml_name and meta.managed_ledger_name != object_ml_name:
        problems.append(f"index names {meta.managed_ledger_name!r} but its object metadata {object_ml_name!r}")
    if want_ml is not None and have_ml is not None:
        compared.append("managed-ledger")
        if have_ml != want_ml:
            problems.append(f"managed ledger {have_ml!r} != expected {want_ml!r}")
    app = meta.custom.get("application")
    if app is not None and app != b"pulsar":
        problems.append(f"source ledger application={app.decode('utf-8', 'replace')!r}, not pulsar")
    if expect.entries is not None and meta.last_entry_id is not None:
        compared.append("entries")
        if meta.last_entry_id != expect.entries - 1:
            problems.append(f"lastEntryId {meta.last_entry_id} != expected entries-1 ({expect.entries - 1})")
    if expect.size is not None and meta.length is not None and meta.length > 0:
        compared.append("size")
        if meta.length != expect.size:
            problems.append(f"length {meta.length} != expected size {expect.size}")
    if expect.ctime_ms is not None and meta.ctime_ms:
        compared.append("ctime")
        if meta.ctime_ms != expect.ctime_ms:
            problems.append(f"ctime {meta.ctime_ms} != expected {expect.ctime_ms}")

    if problems:
        raise OffloadIndexMismatchError(
            f"{name} is not the index of ledger {ledger_id}: " + "; ".join(problems))
    if "managed-ledger" in compared:
        return IndexCheck(Verification.VERIFIED, f"{name}: matched {', '.join(compared)}", (name,), owner=have_ml)
    why = ("names no managed ledger (no pulsar/managed-ledger, no ManagedLedgerName metadata)"
           if have_ml is None else "nothing to compare its managed ledger with")
    return IndexCheck(Verification.UNVERIFIABLE, f"{name}: valid offload index, but it {why}", (name,))


def judge_segment(ledgers: dict[int, SegmentLedgerInfo], ledger_id: int, name: str,
                  expect: IndexExpectation | None, owner_ml_name: str | None = None,
                  fallback_ml_name: str | None = None) -> IndexCheck:
    """Check a streaming index names ``ledger_id`` and no ledger we were not told may go.

    A streaming index records ledger ids, not the topic: "holds ledger L" alone
    would let a request naming any topic delete another topic's segment.  The
    topic is proven only by the ``ManagedLedgerName`` user metadata upstream
    writes on the segment's objects (``owner_ml_name``); without it the segment
    is UNVERIFIABLE."""
    expect = expect or IndexExpectation()
    if ledger_id not in ledgers:
        raise OffloadIndexMismatchError(
            f"{name} does not hold ledger {ledger_id} (it holds {sorted(ledgers)})")
    others = set(ledgers) - {ledger_id} - set(expect.allow_shared_segment_ledgers)
    if others:
        raise OffloadIndexMismatchError(
            f"{name} also holds ledgers {sorted(others)}; deleting it would delete their data")
    info = ledgers[ledger_id]
    if expect.entries is not None and info.entries is not None and info.entries != expect.entries:
        raise OffloadIndexMismatchError(f"{name}: ledger {ledger_id} has {info.entries} entries, "
                                        f"expected {expect.entries}")
    want_ml = expect.managed_ledger_name or fallback_ml_name
    if owner_ml_name is None or want_ml is None:
        return IndexCheck(Verification.UNVERIFIABLE, f"{name}: holds ledger {ledger_id}, but nothing names its "
                          "topic (no ManagedLedgerName metadata on the segment)", (name,))
    if owner_ml_name != want_ml:
        raise OffloadIndexMismatchError(f"{name} belongs to managed ledger {owner_ml_name!r}, not {want_ml!r}")
    return IndexCheck(Verification.VERIFIED, f"{name}: holds ledger {ledger_id} of {owner_ml_name}", (name,),
                      owner=owner_ml_name)


# --------------------------------------------------------------------------- builders
# Upstream-format bytes, for test fixtures and the embedded demo's fake offloads.


def encode_ledger_metadata_format(*, last_entry_id: int, length: int, ctime_ms: int = 0,
                                  custom: dict[str, bytes] | None = None) -> bytes:
    """A ``LedgerMetadataFormat`` (closed, one-bookie ensemble) with the given fields."""
    return encode_ledger_metadata_message(LedgerMetadata(
        quorum_size=1, ensemble_size=1, ack_quorum_size=1, state="CLOSED", length=length,
        last_entry_id=last_entry_id, segments=[Segment(0, ["127.0.0.1:3181"])],
        ctime=ctime_ms or None, custom_metadata=dict(custom or {})))


def pulsar_ledger_metadata(managed_ledger_name: str, *, entries: int, size: int, ctime_ms: int = 0) -> bytes:
    """Metadata of a Pulsar data ledger as the broker creates it."""
    return encode_ledger_metadata_format(
        last_entry_id=entries - 1, length=size, ctime_ms=ctime_ms,
        custom={"application": b"pulsar", "component": b"managed-ledger",
                ML_NAME_KEY: managed_ledger_name.encode()})


def encode_ledger_info(ledger_id: int, entries: int, size: int) -> bytes:
    """A ``ManagedLedgerInfo.LedgerInfo`` (ledgerId=1, entries=2, size=3)."""
    return encode_ledger_info_message(LedgerInfo(ledger_id, entries=entries, size=size))


def _enc_hadoop_vlong(v: int) -> bytes:
    if -112 <= v <= 127:
        return struct.pack(">b", v)
    length = -112
    if v < 0:
        v = ~v
        length = -120
    tmp = v
    while tmp:
        tmp >>= 8
        length -= 1
    n = (-(length + 120)) if length < -120 else (-(length + 112))
    return struct.pack(">b", length) + v.to_bytes(n, "big")


def _enc_hadoop_text(s: str) -> bytes:
    raw = s.encode()
    return _enc_hadoop_vlong(len(raw)) + raw


def build_mapfile_data(ledger_metadata: bytes, entries: list[bytes] | None = None,
                       record_compressed: bool = False) -> bytes:
    """A MapFile ``data`` SequenceFile as upstream's filesystem offloader writes it:
    key ``LongWritable(-1)`` -> ledger metadata, then entry id -> entry bytes."""
    sync = bytes(range(16))
    out = bytearray(b"SEQ\x06")
    out += _enc_hadoop_text("org.apache.hadoop.io.LongWritable")
    out += _enc_hadoop_text("org.apache.hadoop.io.BytesWritable")
    out += bytes([1 if record_compressed else 0, 0])
    if record_compressed:
        out += _enc_hadoop_text("org.apache.hadoop.io.compress.DefaultCodec")
    out += struct.pack(">i", 0) + sync
    for key, value in [(-1, ledger_metadata), *enumerate(entries or [])]:
        val = struct.pack(">i", len(value)) + value
        if record_compressed:
            val = zlib.compress(val)
        out += struct.pack(">ii", 8 + len(val), 8) + struct.pack(">q", key) + val
    return bytes(out)
