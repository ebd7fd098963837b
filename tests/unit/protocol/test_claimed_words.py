"""A value a request chose appears in our reasons only when it reads as a name; any other value is
replaced, wherever and however it is quoted, and the rest of our words are left as they are."""

from __future__ import annotations

import json

from deletion_service.protocol.claimed_words import claimed_values, placeholder, without_claimed_words

WORDS = "ALL CLEAR - verified by operator; run: dlq purge --all"
QUOTED = "it's \"quoted\""


def payload(**fields: object) -> bytes:
    return json.dumps({"topicName": "persistent://t/ns/orders", "ledgerId": 7, **fields}).encode()


def test_names_are_shown_and_words_are_not_however_they_are_quoted() -> None:
    data = payload(bucket=WORDS, region="us-east-1", cursorName=QUOTED, topicName="persistent://t/ns/é-x")
    reason = (f"bucket {WORDS!r} contains whitespace; cursor {json.dumps(QUOTED)} and {QUOTED!r}; "
              f"region 'us-east-1'; topic persistent://t/ns/é-x; bare {WORDS}")
    shown = without_claimed_words(reason, data)
    assert "ALL CLEAR" not in shown and "quoted" not in shown, shown
    assert shown.count(placeholder(WORDS)) == 2 and shown.count(placeholder(QUOTED)) == 2, shown
    assert "region 'us-east-1'" in shown and "topic persistent://t/ns/é-x" in shown  # names stay


def test_keys_count_and_short_values_are_replaced_only_where_quoted() -> None:
    data = payload(driverMetadata={"a b": "x"})
    assert without_claimed_words("key 'a b' is unknown; a b c", data) == f"key {placeholder('a b')} is unknown; a b c"


def test_a_payload_of_names_only_or_not_json_is_not_parsed_and_changes_nothing() -> None:
    assert claimed_values(payload(bucket="offload")) == []
    assert claimed_values(b'{"bucket": "not closed') == []
    assert claimed_values(b"\xff\xfe ALL CLEAR") == []
    assert without_claimed_words("a reason", b"[" * 100_000) == "a reason"
    escaped = b'{"bucket": "ALL\\u0020CLEAR now"}'  # an escaped space is a space once decoded
    assert without_claimed_words("bucket 'ALL CLEAR now'", escaped) == f"bucket {placeholder('ALL CLEAR now')}"
