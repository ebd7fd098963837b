"""Hypothesis strategies for deletion-request payloads a hostile producer may send: any JSON value, deep
nesting, huge numbers, binary, and a valid request with one field replaced by something hostile."""

from __future__ import annotations

import json

from hypothesis import strategies as st

VALID = {"topicName": "persistent://t/ns/live", "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER",
         "ledgerId": 1, "markedAt": 1, "reason": "manual"}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)


@st.composite
def near_valid(draw: st.DrawFn) -> bytes:
    """A valid request with one field replaced by something hostile."""
    body = dict(VALID)
    key = draw(st.sampled_from([*VALID, "offloadContext", "cursorName", "schemaId"]))
    body[key] = draw(json_values | st.sampled_from([
        "persistent://t/ns/..", "persistent://./ns/x", "persistent://t/ns/a\ud800", "\x00", "a" * 5000,
        {"uidMsb": 1, "uidLsb": 1, "driverName": "S3", "driverMetadata": {"serviceEndpoint": "http://a b"}},
    ]))
    text = json.dumps(body, ensure_ascii=draw(st.booleans()))
    return text.encode("utf-8", "surrogatepass")


hostile = st.one_of(
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.integers(min_value=1, max_value=200_000).map(lambda n: b"[" * n),
    st.integers(min_value=1, max_value=50_000).map(lambda n: b'{"a":' * n),
    st.integers(min_value=4301, max_value=20_000).map(lambda n: b'{"ledgerId":' + b"7" * n + b"}"),
    st.binary(min_size=1, max_size=50).map(lambda b: b'{"topicName":"' + b + b'"}'),
    near_valid(),
)
