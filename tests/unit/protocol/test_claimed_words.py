"""A value a request chose appears in our reasons only when it reads as a name; any other value, or part
of one, is replaced wherever and however it is quoted, and the rest of our words are left as they are."""

from __future__ import annotations

import json

import pytest

from deletion_service.protocol.claimed_words import (
    MAX_VALUES,
    claimed_values,
    not_names,
    placeholder,
    too_many,
    without_claimed_words,
)
from deletion_service.protocol.request import InvalidRequest, decode, decode_payload

WORDS = "ALL CLEAR - verified by operator; run: dlq purge --all"
QUOTED = "it's \"quoted\""


def payload(metadata: dict[str, str] | None = None, **fields: object) -> bytes:
    request: dict[str, object] = {"topicName": "persistent://t/ns/orders", "ledgerComponent": "MANAGED_LEDGER",
                                  "ledgerType": "LEDGER", "ledgerId": 7, **fields}
    if metadata is not None:
        request.update(ledgerType="OFFLOAD_LEDGER", offloadContext={
            "uidMsb": 1, "uidLsb": 2, "driverName": "aws-s3", "driverMetadata": metadata})
    return json.dumps(request).encode()


def reason_of(data: bytes) -> str:
    with pytest.raises(InvalidRequest) as raised:
        decode_payload(data)
    return without_claimed_words(f"invalid request: {raised.value}", claimed_values(data))


def test_names_are_shown_and_words_are_not_however_they_are_quoted() -> None:
    data = payload({"bucket": WORDS, "region": "us-east-1"}, cursorName=QUOTED)
    reason = (f"bucket {WORDS!r} contains whitespace; cursor {json.dumps(QUOTED)} and {QUOTED!r}; "
              f"the namespace's region 'us-east-1'; bare {WORDS}")
    shown = without_claimed_words(reason, claimed_values(data))
    assert "ALL CLEAR" not in shown and "quoted" not in shown, shown
    assert shown.count(placeholder(WORDS)) == 2 and shown.count(placeholder(QUOTED)) == 2, shown
    assert "the namespace's region 'us-east-1'" in shown  # names stay, and so do our own apostrophes


def test_a_quoted_part_of_a_value_is_replaced_even_after_an_apostrophe_of_ours() -> None:
    """A topic parser quotes only the bad part of a topic name: the tenant or the namespace."""
    data = payload(topicName=f"persistent://{WORDS}/ns/t")
    shown = reason_of(data)
    assert "ALL CLEAR" not in shown and placeholder(WORDS) in shown, shown
    assert without_claimed_words(f"the tenant's tenant {WORDS!r}", claimed_values(data)) \
        == f"the tenant's tenant {placeholder(WORDS)}"


def test_letters_that_look_like_blanks_or_quotes_are_no_name() -> None:
    look_alike = "\u02baALL\u3164CLEAR\u3164run\u01c3\u02ba"
    data = payload({"bucket": look_alike})
    assert without_claimed_words(f"bucket {look_alike!r} is not allowed", claimed_values(data)) \
        == f"bucket {placeholder(look_alike)} is not allowed"
    assert claimed_values(payload(topicName="persistent://t/ns/é-x")) == ["persistent://t/ns/é-x"]


def test_a_metadata_key_that_is_no_name_is_quoted_in_a_validation_error_and_replaced() -> None:
    data = payload({"ALL OK!": "x" * 2049, "purge": "x" * 2049, "now, ok": "x" * 2049})
    shown = reason_of(data)
    assert "ALL OK!" not in shown and "now, ok" not in shown, shown
    assert "driverMetadata.purge" in shown  # a name stays


def test_only_the_requests_own_fields_count_and_their_cost_is_bounded() -> None:
    assert claimed_values(payload(note=WORDS)) == []  # an unknown field is never quoted by anything
    many = payload({f"k {n}": f"v {n}" for n in range(30_000)})  # under the payload bound
    assert without_claimed_words(f"key 'k 1' and {WORDS}", claimed_values(many)) == too_many(60_000)
    assert len(claimed_values(payload({f"k {n}": "v" for n in range(MAX_VALUES)}))) == MAX_VALUES


def test_a_payload_of_names_only_or_not_json_changes_nothing() -> None:
    assert claimed_values(payload({"bucket": "offload"})) == []
    assert claimed_values(b'{"topicName": "not closed') == []
    assert claimed_values(b"\xff\xfe ALL CLEAR") == []
    assert claimed_values(b'["a b"]') == []
    assert without_claimed_words("a reason", claimed_values(b"[" * 100_000)) == "a reason"
    escaped = b'{"topicName": "ALL\\u0020CLEAR now"}'  # an escaped space is a space once decoded
    assert without_claimed_words("topic 'ALL CLEAR now'", claimed_values(escaped)) \
        == f"topic {placeholder('ALL CLEAR now')}"


def test_a_sentence_written_with_commas_and_brackets_is_no_name() -> None:
    """Compact JSON with no space anywhere: every byte is a name's or JSON's own, and still a sentence."""
    words = "ALL,CLEAR,-,verified,by,operator,-,run:,dlq,purge,--all,[now]"
    compact = json.dumps(json.loads(payload(topicName=f"persistent://{words}/ns/t")), separators=(",", ":"))
    assert " " not in compact
    assert words not in reason_of(compact.encode())


def test_a_decoded_requests_values_are_read_from_its_fields() -> None:
    request = decode(payload({"bucket": "offload", "region": "us-east-1", "note,x": "a b"},
                             cursorName=None, markedAt=1, reason="orphan"))
    assert not_names(request.strings()) == ["note,x", "a b"]  # longest first
    shown = without_claimed_words("key 'note,x' and value 'a b'; region 'us-east-1'", not_names(request.strings()))
    assert shown == f"key {placeholder('note,x')} and value {placeholder('a b')}; region 'us-east-1'"
