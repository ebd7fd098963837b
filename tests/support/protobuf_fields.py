"""The protobuf wire format written by hand, field by field (varint, varint field, length-delimited field),
so that tests build nodes with nothing from our encoder."""

from __future__ import annotations


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 -> ten-byte two's complement, as protobuf does
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def f_int(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def f_len(number: int, data: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(data)) + data
