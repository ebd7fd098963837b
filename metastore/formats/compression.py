"""Pulsar's optional compression envelope around ManagedLedgerInfo/ManagedCursorInfo.

Layout (``MetaStoreImpl`` in Pulsar)::

    0x47 0x78 | uint32 big-endian n | n bytes of *InfoMetadata | compressed payload

where ``*InfoMetadata`` is ``{compressionType = 1, uncompressedSize = 2}``.
Bytes that do not start with the magic are the plain protobuf (a valid
protobuf never starts with 0x47: that would be wire type 7).

Decoding returns the compression too, because a node must be written back the
way it was read: a broker configured for compression keeps ledger lists that
can exceed ZooKeeper's 1 MB limit once uncompressed.
"""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum
from typing import Literal, assert_never

import lz4.block
import snappy
import zstandard
from google.protobuf import unknown_fields

from .errors import FormatError
from .generated import managed_ledger_pb2 as pb
from .protobuf_codec import parse, serialize

MAGIC = 0x4778
_HEADER = struct.Struct(">HI")  # magic, metadata length
_MAGIC_BYTES = MAGIC.to_bytes(2, "big")
_INT32_MAX = 2**31 - 1

Kind = Literal["managed-ledger", "cursor"]


class CompressionType(IntEnum):
    """Pulsar's ``CompressionType`` enum (same numbers on the wire)."""

    NONE = 0
    LZ4 = 1
    ZLIB = 2
    ZSTD = 3
    SNAPPY = 4


_METADATA = {"managed-ledger": pb.ManagedLedgerInfoMetadata, "cursor": pb.ManagedCursorInfoMetadata}


def _compress(payload: bytes, compression: CompressionType) -> bytes:
    match compression:
        case CompressionType.NONE:
            return payload
        case CompressionType.LZ4:
            return lz4.block.compress(payload, store_size=False)  # raw block, size lives in the metadata
        case CompressionType.ZLIB:
            return zlib.compress(payload)  # zlib wrapper, as java.util.zip.Deflater writes
        case CompressionType.ZSTD:
            return zstandard.ZstdCompressor(level=3).compress(payload)
        case CompressionType.SNAPPY:
            return snappy.compress(payload)  # raw snappy, not the framing format
        case _:
            assert_never(compression)


def _inflate_zlib(body: bytes, size: int, what: str) -> bytes:
    inflater = zlib.decompressobj()
    out = inflater.decompress(body, size + 1)
    if len(out) > size:
        raise FormatError(f"{what}: decompressed size is more than the header's uncompressedSize {size}")
    if not inflater.eof:
        raise FormatError(f"{what}: ZLIB stream is truncated")
    if inflater.unused_data:
        raise FormatError(f"{what}: ZLIB stream is followed by extra bytes")
    return out


def _uncompress_snappy(body: bytes) -> bytes:
    out = snappy.uncompress(body)  # bytes: text only with ``decoding=`` (python-snappy has no annotations)
    assert isinstance(out, bytes)
    return out


def _decompress(body: bytes, compression: CompressionType, size: int, what: str) -> bytes:
    try:
        match compression:
            case CompressionType.NONE:
                out = body
            case CompressionType.LZ4:
                out = lz4.block.decompress(body, uncompressed_size=size)
            case CompressionType.ZLIB:
                out = _inflate_zlib(body, size, what)
            case CompressionType.ZSTD:
                out = zstandard.ZstdDecompressor().decompress(body, max_output_size=size + 1)
            case CompressionType.SNAPPY:
                out = _uncompress_snappy(body)
            case _:
                assert_never(compression)
    except FormatError:
        raise
    except Exception as exc:  # each library has its own error types; all mean "corrupt payload"
        raise FormatError(f"{what}: {compression.name} payload does not decompress ({exc})") from exc
    if len(out) != size:
        raise FormatError(f"{what}: decompressed size {len(out)} is not the header's uncompressedSize {size}")
    return out


def _unknown_compression(meta_bytes: bytes) -> int | None:
    """A compressionType number outside the enum, if the metadata carries one.

    proto2 parsers file an unknown value of a closed enum as an unknown field,
    which would surface as a confusing "missing required compressionType".
    """
    probe = pb.ManagedLedgerInfoMetadata()
    try:
        probe.MergeFromString(meta_bytes)
    except Exception:
        return None  # garbage: let parse() report it
    for field in unknown_fields.UnknownFieldSet(probe):
        if field.field_number == 1 and field.wire_type == 0:
            value = int(field.data)
            return value - 2**64 if value >= 2**63 else value  # int32 enums are sign-extended
    return None


def decode(data: bytes, kind: Kind) -> tuple[bytes, CompressionType]:
    """Strip the envelope if present; return (protobuf payload, compression it used)."""
    what = f"{kind} node"
    if data[:2] != _MAGIC_BYTES:
        return bytes(data), CompressionType.NONE
    if len(data) < _HEADER.size:
        raise FormatError(f"{what}: truncated compression header ({len(data)} of {_HEADER.size} bytes)")
    _, meta_len = _HEADER.unpack_from(data)
    body_start = _HEADER.size + meta_len
    if body_start > len(data):
        raise FormatError(
            f"{what}: compression metadata length {meta_len} runs past the end ({len(data)} bytes)"
        )
    meta_bytes = data[_HEADER.size : body_start]
    unknown = _unknown_compression(meta_bytes)
    if unknown is not None:
        raise FormatError(f"{what}: unknown compression type {unknown}")
    meta = parse(_METADATA[kind], meta_bytes, f"{what} compression metadata")
    compression = CompressionType(meta.compressionType)
    size = meta.uncompressedSize
    if size < 0:
        raise FormatError(f"{what}: negative uncompressedSize {size}")
    return _decompress(data[body_start:], compression, size, what), compression


def encode(payload: bytes, compression: CompressionType, kind: Kind) -> bytes:
    """Wrap ``payload`` the way Pulsar writes it: NONE means no envelope at all."""
    compression = CompressionType(compression)
    if compression is CompressionType.NONE:
        return bytes(payload)
    if len(payload) > _INT32_MAX:
        raise FormatError(f"{kind} node: payload of {len(payload)} bytes exceeds int32 uncompressedSize")
    meta = _METADATA[kind](compressionType=int(compression), uncompressedSize=len(payload))
    meta_bytes = serialize(meta, f"{kind} compression metadata")
    return _HEADER.pack(MAGIC, len(meta_bytes)) + meta_bytes + _compress(payload, compression)
