"""The protobuf codec helpers every format module shares: parse, serialize, presence, unknown fields, varints.

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
        raise FormatError(f"{what}: {cls.DESCRIPTOR.name} lacks required field(s) {missing_fields(msg)}")
    return msg


def missing_fields(msg: Message) -> str:
    """The required fields ``msg`` lacks, comma-separated, for an error message."""
    # Every runtime (upb, pure Python) defines FindInitializationErrors, but protobuf's message.py,
    # which the type checker reads as the stub, declares it only on the implementations.
    errors: list[str] = msg.FindInitializationErrors()  # pyright: ignore[reportAttributeAccessIssue]
    return ", ".join(errors)


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


def unknown_bytes(msg: Message) -> bytes:
    """The wire bytes of ``msg``'s top-level fields that its descriptor does not know.

    protobuf keeps unknown fields through a copy and a ``ClearField`` of every
    known one, so serializing what is left is exactly those bytes, in the
    order they were read; we never walk the wire format ourselves.  Partial
    serialization, because clearing drops required fields too.  What protobuf
    calls unknown is also a known field number arriving with a wire type our
    ``.proto`` does not declare: it is kept as well, as any protobuf runtime
    would keep it on a rewrite.
    """
    if len(unknown_fields.UnknownFieldSet(msg)) == 0:
        return b""  # the common case, without copying a large message
    rest = type(msg)()
    rest.CopyFrom(msg)
    for known in msg.DESCRIPTOR.fields:
        rest.ClearField(known.name)
    return rest.SerializePartialToString()


def merge_unknown(msg: Message, extra: bytes) -> None:
    """Put back fields kept by :func:`unknown_bytes` (protobuf keeps them as unknown)."""
    if extra:
        msg.MergeFromString(extra)
