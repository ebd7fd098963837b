"""Small protobuf wire-level helpers shared by the format modules.

Why they exist:

* ``parse`` turns every protobuf failure into a :class:`FormatError` that says
  *which* node type could not be read, instead of a bare ``DecodeError``.
* ``unknown_bytes``/``merge_unknown`` keep fields our ``.proto`` files do not
  know.  We rewrite managed-ledger and cursor nodes that brokers own; a newer
  Pulsar may have added fields, and dropping them on write-back would silently
  lose its state.  They travel through the dataclasses as opaque bytes.
* ``read_varint``/``write_varint`` frame BookKeeper's v3 metadata (a varint32
  length before the message).
"""

from __future__ import annotations

from typing import Any, TypeVar

from google.protobuf import unknown_fields
from google.protobuf.message import DecodeError, EncodeError, Message

from .errors import FormatError

M = TypeVar("M", bound=Message)

_WT_VARINT, _WT_I64, _WT_LEN, _WT_SGROUP, _WT_EGROUP, _WT_I32 = 0, 1, 2, 3, 4, 5


def parse(cls: type[M], data: bytes, what: str) -> M:
    """Parse ``data`` as ``cls``; refuse garbage and missing required fields.

    The upb runtime does not check required fields while parsing, so we do:
    a proto2 ``required`` field absent means the bytes are not this message.
    """
    msg = cls()
    try:
        msg.MergeFromString(data)
    except (DecodeError, RuntimeWarning, ValueError) as exc:
        raise FormatError(f"{what}: not a valid {cls.DESCRIPTOR.name} protobuf ({exc})") from exc
    if not msg.IsInitialized():
        missing = ", ".join(msg.FindInitializationErrors())
        raise FormatError(f"{what}: {cls.DESCRIPTOR.name} lacks required field(s) {missing}")
    return msg


def opt(msg: Message, name: str) -> Any:
    """A proto2 optional field's value, or ``None`` when absent (presence matters upstream)."""
    return getattr(msg, name) if msg.HasField(name) else None


def set_opt(msg: Message, name: str, value: object) -> None:
    """Set an optional field unless ``value`` is ``None`` (= leave it absent)."""
    if value is not None:
        setattr(msg, name, value)


def serialize(msg: Message, what: str) -> bytes:
    """Serialize, turning a missing required field into a :class:`FormatError`."""
    try:
        return msg.SerializeToString()
    except (EncodeError, ValueError) as exc:
        raise FormatError(f"{what}: cannot encode {msg.DESCRIPTOR.name} ({exc})") from exc


def read_varint(data: bytes, pos: int, what: str) -> tuple[int, int]:
    """Read an unsigned varint (at most 10 bytes) at ``pos``; return (value, next pos)."""
    result = 0
    for i in range(10):
        if pos + i >= len(data):
            raise FormatError(f"{what}: truncated varint at offset {pos}")
        byte = data[pos + i]
        result |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return result, pos + i + 1
    raise FormatError(f"{what}: varint longer than 10 bytes at offset {pos}")


def write_varint(value: int) -> bytes:
    """Encode a non-negative int as an unsigned varint."""
    if value < 0:
        raise ValueError(f"varint must be non-negative, got {value}")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _skip_field(data: bytes, pos: int, number: int, wire_type: int) -> int:
    """Return the position after the value of a field whose tag ended at ``pos``."""
    what = "unknown protobuf field"
    if wire_type == _WT_VARINT:
        return read_varint(data, pos, what)[1]
    if wire_type == _WT_I64:
        return pos + 8
    if wire_type == _WT_I32:
        return pos + 4
    if wire_type == _WT_LEN:
        length, pos = read_varint(data, pos, what)
        return pos + length
    if wire_type == _WT_SGROUP:
        while True:
            tag, pos = read_varint(data, pos, what)
            if tag & 7 == _WT_EGROUP:
                if tag >> 3 != number:
                    raise FormatError(f"{what}: group {number} closed by {tag >> 3}")
                return pos
            pos = _skip_field(data, pos, tag >> 3, tag & 7)
    raise FormatError(f"{what}: wire type {wire_type} for field {number}")


def unknown_bytes(msg: Message) -> bytes:
    """The wire bytes of ``msg``'s top-level fields that its descriptor does not know."""
    if len(unknown_fields.UnknownFieldSet(msg)) == 0:
        return b""
    data = msg.SerializeToString()
    known = {f.number for f in msg.DESCRIPTOR.fields}
    out = bytearray()
    pos = 0
    while pos < len(data):
        start = pos
        tag, pos = read_varint(data, pos, "unknown protobuf field")
        pos = _skip_field(data, pos, tag >> 3, tag & 7)
        if tag >> 3 not in known:
            out += data[start:pos]
    return bytes(out)


def merge_unknown(msg: Message, extra: bytes) -> None:
    """Put back fields kept by :func:`unknown_bytes` (protobuf keeps them as unknown)."""
    if extra:
        msg.MergeFromString(extra)
