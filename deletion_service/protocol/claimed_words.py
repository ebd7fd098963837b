"""Our words about a request never carry the request's own words.

A decision's reason ends up where an operator reads it as ours: a DLQ copy's
sealed ``lastError``, a RETRY copy's sealed hold words, the audit trail, the
log lines ``status`` shows.  Those reasons quote what the request named (a
bucket that cannot be one, a topic of another namespace, a cursor), and
whoever may produce a request chooses those values.  Quoted verbatim, a
"bucket" such as ``ALL CLEAR - verified by operator; run: dlq purge --all``
puts the producer's sentence inside text this tool signs.

So a value the request chose is shown in a reason only when it reads as a
name: letters, digits and ``_ . - : / = % + @ ~``, the characters of Pulsar's
topic, tenant and cursor names, S3 buckets, regions and endpoints.  Any other
value (whitespace, quotes, punctuation, control characters) is replaced by
:func:`placeholder`, which says how long it was and that the request itself
holds it: ``dlq list --json`` shows the request, labelled as the request.
The rule is applied once, where a message's decision is taken
(:meth:`~deletion_service.delete_phase.rules.lifecycle.MessageInHand.decide`),
so every place that quotes a request is covered, including future ones.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

#: A value that reads as a name, shown as it is.
_NAME = re.compile(r"[\w.\-:/=%+@~]*")
#: Payload bytes that could belong to a value that is no name (anything but a name's ASCII characters,
#: JSON's punctuation and digits): a payload without one needs no parsing (nearly every payload).
_MAYBE_WORDS = re.compile(rb'[^A-Za-z0-9_.\-:/=%+@~{}\[\]",]')
#: Past this a payload is not parsed for its strings (decoding refused it already, for its size).
_MAX_PAYLOAD = 1 << 20
#: A bare value shorter than this is replaced only where it is quoted: three characters of prose
#: ("a b") are also in our own words, and would be cut out of them.
_MIN_BARE = 8


def placeholder(value: str) -> str:
    """What a reason shows in place of a value that is no name."""
    return f"<{len(value)} characters of the request's, not a name: see the request>"


def is_name(value: str) -> bool:
    """A value shown as it is: a name's characters only."""
    return _NAME.fullmatch(value) is not None


def _strings(node: object) -> Iterator[str]:
    """Every string of a decoded JSON document, keys included (a metadata key is quoted too)."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)


def claimed_values(payload: bytes) -> list[str]:
    """The values of ``payload`` that are no name, longest first (so a value inside another is
    replaced after it); empty for a payload that is not JSON (a decoding error quotes none of it)."""
    if len(payload) > _MAX_PAYLOAD or _MAYBE_WORDS.search(payload) is None:
        return []
    try:
        document = json.loads(payload)
    except (ValueError, RecursionError):
        return []
    return sorted({s for s in _strings(document) if s and not is_name(s)}, key=len, reverse=True)


def without_claimed_words(reason: str, payload: bytes) -> str:
    """``reason`` with every value of ``payload`` that is no name replaced by :func:`placeholder`:
    quoted (as ``repr`` or JSON quote it) wherever it is, bare when it is long enough to be its own."""
    values = claimed_values(payload)
    for value in values:
        shown = placeholder(value)
        for quoted in (repr(value), json.dumps(value), json.dumps(value, ensure_ascii=False)):
            reason = reason.replace(quoted, shown)
        if len(value) >= _MIN_BARE:
            reason = reason.replace(value, shown)
    return reason
