"""Our words about a request never carry the request's own words.

A decision's reason ends up where an operator reads it as ours: a DLQ copy's
sealed ``lastError``, a RETRY copy's sealed hold words, the audit trail, the
log lines ``status`` shows.  Those reasons quote what the request named (a
bucket that cannot be one, a topic of another namespace, the part of a topic
name that is wrong), and whoever may produce a request chooses those values.
Quoted verbatim, a "bucket" such as ``ALL CLEAR - verified by operator; run:
dlq purge --all`` puts the producer's sentence inside text this tool signs.

So a value the request chose is shown in a reason only when it reads as a
name: ASCII letters, digits and ``_ . - : / = % + @ ~``, the characters of
Pulsar's topic, tenant and cursor names, S3 buckets, regions and endpoints
(ASCII only: Unicode has letters that render as a blank, a quote or an
exclamation mark).  Anything else is replaced by :func:`placeholder`, which
says how long it was and that the request holds it: ``dlq list --json`` shows
the request, labelled as the request.  What is replaced:

* every quoted span of the reason (as ``repr`` or JSON quote) that is not a name
  and is a value of the request, or a part of one (a parser quotes the bad part
  of a topic name);
* every value of the request that is not a name, wherever it stands bare, when it
  is long enough to be its own (:data:`_MIN_BARE`; shorter ones are quoted by the
  code that names them, e.g. the keys in a validation error's location).

Only the request's own fields count (the topic, cursor, schema, kinds, reason,
and the offload context's driver and metadata, keys too): an unknown field is
never quoted by anything.  A request naming more than :data:`MAX_VALUES` such
values gets no reason of its own words at all, so the cost of this rule stays
bounded whatever the request carries.  The rule is applied once, where a
message's decision is taken
(:meth:`~deletion_service.delete_phase.rules.lifecycle.MessageInHand.decide`),
so every place that quotes a request is covered, including future ones.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Iterator

#: A value that reads as a name, shown as it is.
_NAME = re.compile(r"[A-Za-z0-9_.\-:/=%+@~]*")
#: A quoted span as ``repr`` or JSON writes one.
_QUOTED = re.compile(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"")
#: Past this a payload is not parsed for its strings (decoding refused it already, for its size).
_MAX_PAYLOAD = 1 << 20
#: A bare value shorter than this is replaced only where it is quoted: three characters of prose
#: ("a b") are also in our own words, and would be cut out of them.
_MIN_BARE = 8
#: More values that are no names than this, and the reason is replaced whole (:func:`too_many`).
MAX_VALUES = 64
#: The request's fields whose values a reason may quote (an unknown field is ignored, never quoted).
_FIELDS = ("topicName", "cursorName", "schemaId", "ledgerComponent", "ledgerType", "reason", "offloadContext")


def placeholder(value: str) -> str:
    """What a reason shows in place of a value that is no name."""
    return f"<{len(value)} characters of the request's, not a name: see the request>"


def too_many(count: int) -> str:
    """The whole reason of a request naming more than :data:`MAX_VALUES` values that are no names."""
    return f"<the request names {count} values that are not names; its reason is not shown: see the request>"


def is_name(value: str) -> bool:
    """A value shown as it is: a name's characters only."""
    return _NAME.fullmatch(value) is not None


def _strings(node: object) -> Iterator[str]:
    """Every string under ``node``, keys included (a metadata key is quoted too)."""
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
    """The values of the request's fields in an undecodable ``payload`` that are no name (see
    :func:`not_names`); empty for a payload that is not a JSON object (a decoding error quotes none of
    it).  Always parsed: a byte-level shortcut would have to tell ``,`` or ``[`` inside a value from
    JSON's own, and missed a sentence written with commas."""
    if len(payload) > _MAX_PAYLOAD:
        return []
    try:
        document = json.loads(payload)
    except (ValueError, RecursionError):
        return []
    if not isinstance(document, dict):
        return []
    return not_names(s for f in _FIELDS for s in _strings(document.get(f)))


def not_names(strings: Iterable[str]) -> list[str]:
    """Those of ``strings`` that are no name, longest first (so a value inside another is replaced after
    it); unsorted past :data:`MAX_VALUES` (the reason is then replaced whole)."""
    found = {s for s in strings if s and not is_name(s)}
    return sorted(found, key=len, reverse=True) if len(found) <= MAX_VALUES else list(found)


def _unquoted(span: str) -> str:
    """A quoted span's text as the value it quotes (``repr``'s and JSON's escapes undone)."""
    try:
        value = ast.literal_eval(span)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return span[1:-1]
    return value if isinstance(value, str) else span[1:-1]


def without_claimed_words(reason: str, values: list[str]) -> str:
    """``reason`` with every one of ``values``, or part of one, replaced by :func:`placeholder` (see the
    module's docstring for where).  ``values``: :func:`not_names` of a decoded request's ``strings()``,
    or :func:`claimed_values` of a payload that did not decode."""
    if not values:
        return reason
    if len(values) > MAX_VALUES:
        return too_many(len(values))
    reason = _without_quoted_claims(reason, "\0".join(values))
    for value in values:
        if len(value) >= _MIN_BARE:
            reason = reason.replace(value, placeholder(value))
    return reason


def _without_quoted_claims(reason: str, haystack: str) -> str:
    """Each quoted span that is no name and is (part of) a value in ``haystack``, replaced.  A span is
    tried from every quote character, not only after the last span: an apostrophe of our own words
    ("the namespace's topic") would otherwise pair with the quote that opens a value, and hide it."""
    out: list[str] = []
    done = at = 0
    while (at := _next_quote(reason, at)) >= 0:
        match = _QUOTED.match(reason, at)
        if match is not None:
            text = _unquoted(match.group())
            if text and not is_name(text) and (text in haystack or match.group()[1:-1] in haystack):
                out += [reason[done:at], placeholder(text)]
                done = at = match.end()
                continue
        at += 1
    return "".join(out) + reason[done:]


def _next_quote(text: str, at: int) -> int:
    """Where the next ``'`` or ``"`` is from ``at`` (-1: none)."""
    found = [i for i in (text.find("'", at), text.find('"', at)) if i >= 0]
    return min(found) if found else -1
