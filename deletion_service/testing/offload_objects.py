"""Tiered-storage objects in upstream's byte layouts: fixtures for tests and the demo's offloads.

The readers these mirror are in :mod:`offloaders.index_format`; building the
bytes here, away from the offloaders, keeps what the daemon ships for
deleting free of code that only writes fixtures.  The embedded protobuf
messages go through the project's own codecs in :mod:`metastore.formats`.
"""

from __future__ import annotations

import struct
import zlib

from metastore.formats import LedgerInfo, LedgerMetadata, Segment
from metastore.formats.bk_ledger import encode_ledger_metadata_message
from metastore.formats.custom_metadata import (
    APPLICATION_KEY,
    APPLICATION_PULSAR,
    COMPONENT_KEY,
    COMPONENT_MANAGED_LEDGER,
    MANAGED_LEDGER_KEY,
)
from metastore.formats.managed_ledger import encode_ledger_info as encode_ledger_info_message
from offloaders.index_format import (
    INDEX_MAGIC_V1,
    INDEX_MAGIC_V2,
    INDEX_V1_HEADER,
    INDEX_V2_HEADER,
    INDEX_V2_LEDGER,
)

# --------------------------------------------------------------------------- embedded metadata


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
        custom={APPLICATION_KEY: APPLICATION_PULSAR.encode(), COMPONENT_KEY: COMPONENT_MANAGED_LEDGER.encode(),
                MANAGED_LEDGER_KEY: managed_ledger_name.encode()})


def encode_ledger_info(ledger_id: int, entries: int, size: int) -> bytes:
    """A ``ManagedLedgerInfo.LedgerInfo`` (ledgerId=1, entries=2, size=3)."""
    return encode_ledger_info_message(LedgerInfo(ledger_id, entries=entries, size=size))


# --------------------------------------------------------------------------- index blocks


def build_index_v1(meta_format: bytes, entries: int = 0) -> bytes:
    """A per-ledger index block (``OffloadIndexBlockImpl``) embedding ``meta_format``."""
    body = meta_format + b"".join(struct.pack(">qiq", i, i + 1, 0) for i in range(entries))
    total = INDEX_V1_HEADER.size + len(body)
    return INDEX_V1_HEADER.pack(INDEX_MAGIC_V1 - (1 << 32), total, 0, 0, entries, len(meta_format)) + body


def build_index_v2(ledgers: dict[int, bytes]) -> bytes:
    """A streaming index with the given ledger id -> ``LedgerInfo`` bytes (no entries)."""
    body = b"".join(INDEX_V2_LEDGER.pack(lid, 0, len(info)) + info for lid, info in ledgers.items())
    return INDEX_V2_HEADER.pack(INDEX_MAGIC_V2, INDEX_V2_HEADER.size + len(body), 0, 0) + body


# --------------------------------------------------------------------------- SequenceFile


def _enc_hadoop_vlong(v: int) -> bytes:
    """``WritableUtils.writeVLong``."""
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
