"""BookKeeper ledger metadata: v3 binary and v2 text read, v1 and garbage refused."""

from __future__ import annotations

import contextlib
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metastore.formats import (
    FormatError,
    LedgerMetadata,
    Segment,
    decode_ledger_metadata,
    encode_ledger_metadata,
)
from metastore.formats.bk_ledger import DIGEST_TYPES, STATES
from tests.support.protobuf_fields import f_int, f_len, varint

V3 = b"BookieMetadataFormatVersion\t3\n"
V2 = b"BookieMetadataFormatVersion\t2\n"


def hand_v3_message() -> bytes:
    """A CLOSED data ledger of Pulsar, field by field (ctime and cToken set)."""
    segment = f_len(1, b"bk-1:3181") + f_len(1, b"bk-2:3181") + f_int(2, 0)
    custom = [
        (b"application", b"pulsar"),
        (b"component", b"managed-ledger"),
        (b"pulsar/managed-ledger", b"t/ns/persistent/orders"),
    ]
    return (
        f_int(1, 2)  # quorumSize
        + f_int(2, 2)  # ensembleSize
        + f_int(3, 1234)  # length
        + f_int(4, 99)  # lastEntryId
        + f_int(5, 3)  # state CLOSED
        + f_len(6, segment)
        + f_int(7, 1)  # CRC32
        + f_len(8, b"pw")
        + f_int(9, 2)  # ackQuorumSize
        + f_int(10, 1_700_000_000_000)  # ctime
        + b"".join(f_len(11, f_len(1, k) + f_len(2, v)) for k, v in custom)
        + f_int(12, 2**63 - 1)  # cToken
    )


def test_hand_built_v3() -> None:
    message = hand_v3_message()
    data = V3 + varint(len(message)) + message
    meta = decode_ledger_metadata(data)
    assert meta == LedgerMetadata(
        quorum_size=2,
        ensemble_size=2,
        ack_quorum_size=2,
        state="CLOSED",
        length=1234,
        last_entry_id=99,
        segments=[Segment(0, ["bk-1:3181", "bk-2:3181"])],
        digest_type="CRC32",
        password=b"pw",
        ctime=1_700_000_000_000,
        custom_metadata={
            "application": b"pulsar",
            "component": b"managed-ledger",
            "pulsar/managed-ledger": b"t/ns/persistent/orders",
        },
        c_token=2**63 - 1,
        format_version=3,
    )
    assert meta.ctime_or(5) == 1_700_000_000_000
    assert encode_ledger_metadata(meta) == data


V2_TEXT = b"""quorumSize: 2
ensembleSize: 3
length: 0
lastEntryId: -1
state: IN_RECOVERY
segment {
  ensembleMember: "10.0.0.1:3181"
  ensembleMember: "10.0.0.2:3181"
  ensembleMember: "10.0.0.3:3181"
  firstEntryId: 0
}
digestType: HMAC
password: "secret"
customMetadata {
  key: "application"
  value: "pulsar"
}
"""


def test_hand_built_v2_text() -> None:
    meta = decode_ledger_metadata(V2 + V2_TEXT)
    assert meta.format_version == 2
    assert meta.state == "IN_RECOVERY"
    assert (meta.quorum_size, meta.ensemble_size) == (2, 3)
    assert meta.ack_quorum_size == 2  # absent: BookKeeper uses the write quorum
    assert meta.ctime is None and meta.c_token is None
    assert meta.digest_type == "HMAC" and meta.password == b"secret"
    assert meta.segments == [Segment(0, ["10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181"])]
    assert meta.custom_text("application") == "pulsar"
    assert decode_ledger_metadata(encode_ledger_metadata(meta)) == meta


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"BookieMetadataFormatVersion\t1\n3\n2\n0\n-1\nOPEN", "format version 1 is not supported"),
        (b"BookieMetadataFormatVersion\t4\n\x00", "format version 4 is not supported"),
        (b"BookieMetadataFormatVersion\tx\n", "is not a number"),
        (b"BookieMetadataFormatVersion\t3", "truncated or overlong"),
        (b"\x08\x02\x10\x02", "missing 'BookieMetadataFormatVersion' header"),
        (b"", "missing 'BookieMetadataFormatVersion' header"),
        (V3, "truncated varint"),
        (V3 + b"\x80", "truncated varint"),
        (V3 + b"\x10" + b"\x08\x02", "runs past the end"),
        (V3 + b"\x02\x08\x02" + b"xx", "unexpected bytes after the message"),
        (V3 + b"\x04\x08\x02\x10\x02", "lacks required field(s) length"),
        (V3 + b"\x03\xff\xff\xff", "not a valid LedgerMetadataFormat"),
        (V2 + b"quorumSize: 2\nensembleSize: 2\nlength: 0\n", "format 2 text lacks required field(s) state"),
        (V2 + b"quorumSize: two\n", "format 2 text does not parse"),
        (V2 + b"\xff\xfe", "format 2 text does not parse"),
    ],
)
def test_refused(data: bytes, message: str) -> None:
    with pytest.raises(FormatError, match=re.escape(message)):
        decode_ledger_metadata(data)


def test_encode_refuses_unknown_values() -> None:
    with pytest.raises(FormatError, match="unknown state 'DELETED'"):
        encode_ledger_metadata(LedgerMetadata(1, 1, 1, state="DELETED"))
    with pytest.raises(FormatError, match="cannot encode format version 1"):
        encode_ledger_metadata(LedgerMetadata(1, 1, 1, format_version=1))


INT32 = st.integers(0, 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
LEDGER_METADATA = st.builds(
    LedgerMetadata,
    quorum_size=INT32,
    ensemble_size=INT32,
    ack_quorum_size=INT32,
    state=st.sampled_from(STATES),
    length=INT64,
    last_entry_id=INT64,
    segments=st.lists(st.builds(Segment, INT64, st.lists(st.text(max_size=12), max_size=3)), max_size=3),
    digest_type=st.none() | st.sampled_from(DIGEST_TYPES),
    password=st.binary(max_size=8),
    ctime=st.none() | INT64,
    custom_metadata=st.dictionaries(st.text(max_size=10), st.binary(max_size=10), max_size=4),
    c_token=st.none() | INT64,
    format_version=st.sampled_from([2, 3]),
)


@settings(max_examples=150)
@given(LEDGER_METADATA)
def test_round_trip(meta: LedgerMetadata) -> None:
    assert decode_ledger_metadata(encode_ledger_metadata(meta)) == meta


@settings(max_examples=200)
@given(st.binary(max_size=60))
def test_garbage_after_v3_header_is_refused_cleanly(tail: bytes) -> None:
    with contextlib.suppress(FormatError):  # anything else escaping is the bug
        decode_ledger_metadata(V3 + tail)
