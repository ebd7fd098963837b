"""How a received message leaves our hands: ack, reconsume later, or dead-letter.

Reconsume and dead-letter publish first and ack only after the broker's
receipt, so a crash in between duplicates a request (harmless: deletion is
idempotent) and never loses one.  Property names are the Java client's, so
tools built for Pulsar's retry/DLQ topics read ours.

**A copy carries a request's properties, never its claims about us.**  Whoever may produce
to a deletion topic chooses its properties, so a copy drops every property this tool writes
and reads itself (:data:`OURS`) before setting its own: a request must not smuggle a DLQ
settlement marker, a ``reason`` or a truncation flag into its DLQ copy.  ``REAL_TOPIC`` is
the broker's word (the topic the message was read on) unless the message was read on a RETRY
topic, where a ``REAL_TOPIC`` naming a topic of the same family (the same request topic,
RETRY and DLQ) is kept: nothing routes by it, and it can name no other namespace.

**What a copy says of this tool's work is sealed** (:mod:`..rules.seal`, under the key ``dlq purge``
signs its markers with): the hold label of a RETRY copy, its retry count (``RECONSUMETIMES``, under
:data:`ATTEMPTS_SEAL`), and a DLQ copy's ``reason``, ``lastError`` and count (:data:`PARKED_SEAL`).
The intake reads a count only when its seal holds (:func:`with_proven_count`): a producer on RETRY
cannot spend a request's retry budget, nor put a figure on ``dlq list``.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import re

from deletion_service.broker.interface import Outgoing, Received
from deletion_service.broker.publisher import CopyPublisher
from deletion_service.delete_phase.rules.decision import Kind
from deletion_service.delete_phase.rules.hold_reason import (
    HELD_FOR,
    HELD_SEAL,
    HELD_WHY,
    HoldSeal,
    label_of,
    of_decision,
)
from deletion_service.delete_phase.rules.seal import AttemptsSeal, ParkedSeal, Seal
from deletion_service.protocol.topics import family

RECONSUMETIMES = "RECONSUMETIMES"
DELAY_TIME = "DELAY_TIME"
REAL_TOPIC = "REAL_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
DLQ_REASON = "reason"
DLQ_LAST_ERROR = "lastError"
DLQ_PAYLOAD_BASE64 = "payloadBase64"
DLQ_PAYLOAD_TRUNCATED = "payloadTruncated"
DLQ_PAYLOAD_SIZE = "payloadSize"
DLQ_PAYLOAD_SHA256 = "payloadSha256"
#: Ours: when this daemon first held the request in its in-use grace (ms, its own clock).  A forged
#: value can only end the grace of its own message early: that acks a listed ledger as in use.
GRACE_SINCE = "ledgerDeletionGraceSince"
#: Ours: the property of a DLQ settlement marker (see :mod:`deletion_service.dlq.marker`).  Only
#: ``dlq purge``/``requeue`` write it, signed; a copy never carries it.
SETTLED_MARKER = "ledgerDeletionSettled"
#: Ours: the seal of a RETRY copy's ``RECONSUMETIMES`` (:class:`~..rules.seal.AttemptsSeal`).
ATTEMPTS_SEAL = "ledgerDeletionAttemptsSeal"
#: Ours: the seal of a DLQ copy's ``reason``, ``lastError`` and ``RECONSUMETIMES`` (:class:`~..rules.seal.ParkedSeal`).
PARKED_SEAL = "ledgerDeletionParkedSeal"
#: Properties this tool writes itself and reads back: never carried over from a received message.
OURS = frozenset({REAL_TOPIC, ORIGIN_MESSAGE_ID, DLQ_REASON, DLQ_LAST_ERROR, DLQ_PAYLOAD_BASE64,
                  DLQ_PAYLOAD_TRUNCATED, DLQ_PAYLOAD_SIZE, DLQ_PAYLOAD_SHA256, SETTLED_MARKER, HELD_FOR, HELD_WHY,
                  HELD_SEAL, ATTEMPTS_SEAL, PARKED_SEAL})
_PARTITION = re.compile(r"-partition-\d+$")

#: The DLQ copy's body is cut to this, so it always fits a broker's message limit (Pulsar's
#: default is 5 MB; the request topics' own copies are at most ``model.MAX_PAYLOAD_BYTES``).
MAX_DLQ_BODY = 256 * 1024
#: ``payloadBase64`` (the undecodable bytes, for an operator) only for payloads up to this.
MAX_BASE64_SOURCE = 48 * 1024
#: Properties copied from a received message: each at most this long, at most this many.
MAX_PROPERTY_CHARS = 4096
MAX_PROPERTIES = 64


def attempts(message: Received) -> int:
    """How many times the request was already reconsumed (0 for a fresh one or a garbled count).  Read
    from a message as the intake lets it through (:func:`with_proven_count`): a count this tool sealed."""
    try:
        return max(0, int(message.properties.get(RECONSUMETIMES, "0")[:20]))
    except ValueError:
        return 0


def with_proven_count(message: Received, seal: Seal | None) -> Received:
    """``message`` as the daemon reads it: without its ``RECONSUMETIMES`` unless this tool sealed that count
    for this body in this family of topics, so an unproven count reads 0.  Without a key (``seal`` None or
    keyless) the count stays as written: read as 0, a request that keeps failing would never run out of
    tries.  A count dropped here is not carried onto the message's copies either."""
    count = message.properties.get(RECONSUMETIMES)
    check = AttemptsSeal.sharing(seal)
    if count is None or not check.usable or check.proves(count, message.properties.get(ATTEMPTS_SEAL),
                                                          message.topic, message.data):
        return message
    return dataclasses.replace(message, properties={k: v for k, v in message.properties.items()
                                                    if k not in (RECONSUMETIMES, ATTEMPTS_SEAL)})


def grace_since(message: Received) -> int | None:
    """When the request's in-use grace began, from its RETRY copy (``None``: not begun, or garbled)."""
    try:
        return int(message.properties.get(GRACE_SINCE, "")[:20])
    except ValueError:
        return None


def due_at_ms(message: Received, max_delay_s: float, now_ms: int) -> int:
    """When a RETRY message may be processed: its publish time plus its ``DELAY_TIME``.

    The embedded broker ignores delayed delivery, so the consumer enforces it.
    ``DELAY_TIME`` is whatever the publisher wrote: anyone who can publish to
    RETRY could hold messages forever, so the delay is capped by config
    (``max_delay_s``, the longest delay the decision table itself chooses).  The
    publish time is the publisher's clock: one running ahead of ours (another
    replica's) would hold the message longer by as much, so it waits at most its
    delay from when it is received here."""
    try:
        delay_ms = int(message.properties.get(DELAY_TIME, "0")[:20])
    except ValueError:
        delay_ms = 0
    delay_ms = min(max(0, delay_ms), int(max_delay_s * 1000))
    return min(message.publish_time_ms + delay_ms, now_ms + delay_ms)


def _origin(message: Received) -> dict[str, str]:
    """Where the request was first read: the broker's word, or (read on RETRY) the ``REAL_TOPIC`` of
    our earlier copy when it names a topic of the same family; anything else is a producer's claim."""
    claimed = message.properties.get(REAL_TOPIC)
    from_retry = _PARTITION.sub("", message.topic).endswith("-RETRY")
    if (from_retry and isinstance(claimed, str) and len(claimed) <= MAX_PROPERTY_CHARS
            and family(claimed) == family(message.topic)):
        origin_id = message.properties.get(ORIGIN_MESSAGE_ID, message.message_id)
        return {REAL_TOPIC: claimed, ORIGIN_MESSAGE_ID: str(origin_id)[:MAX_PROPERTY_CHARS]}
    return {REAL_TOPIC: message.topic, ORIGIN_MESSAGE_ID: message.message_id}


def _carried(message: Received) -> dict[str, str]:
    """The received message's properties, bounded (a copy must never outgrow the broker's limit), minus
    :data:`OURS` (a request's claims about this tool's own bookkeeping are not carried)."""
    kept = {k: v for k, v in message.properties.items()
            if isinstance(k, str) and isinstance(v, str) and k not in OURS and len(k) + len(v) <= MAX_PROPERTY_CHARS}
    return dict(list(kept.items())[:MAX_PROPERTIES])


def retry_copy(message: Received, delay_s: float, counts: bool = True,
               grace_since_ms: int | None = None, kind: Kind = Kind.NONE, why: str = "",
               seal: Seal | None = None) -> Outgoing:
    """Reconsume later, step one: the copy for RETRY (the caller acks the original once it is receipted).
    ``counts`` False: a deferral that is no try of the request's (an outage), its attempts unchanged.
    ``grace_since_ms``: the in-use grace this copy waits out began then (see ``decision._in_use_grace``).
    ``kind``, ``why``: the decision's, written as why the copy waits (``rules.hold_reason``, for people).
    Label and count are sealed under ``seal``'s key (without one the copy carries no label, which would
    read ``unknown`` anyway, and an unsealed count, which a daemon with a key reads as 0)."""
    count = attempts(message) + (1 if counts else 0)
    props = {**_carried(message), **_origin(message), RECONSUMETIMES: str(count), DELAY_TIME: str(int(delay_s * 1000)),
             **HoldSeal.sharing(seal).label(of_decision(kind, counts), why[:200], message.data)}
    count_seal = AttemptsSeal.sharing(seal).seal(count, message.topic, message.data)
    if count_seal is not None:
        props[ATTEMPTS_SEAL] = count_seal
    if grace_since_ms is not None:
        props[GRACE_SINCE] = str(grace_since_ms)
    return Outgoing(message.data, props, delay_s, source_topic=message.topic)


def hand_back_to_retry(publisher: CopyPublisher, message: Received, remaining_s: float) -> str:
    """Hand a not-yet-due RETRY message back to RETRY with the delay it has left, its attempts unchanged
    (the worker's not-yet-due set is full; the broker keeps it instead of our memory).  Its hold label
    and its count's seal go with it as they are (same body, same family, same count): whoever reads them
    checks them."""
    held = label_of(message.properties)
    if ATTEMPTS_SEAL in message.properties:
        held[ATTEMPTS_SEAL] = message.properties[ATTEMPTS_SEAL]
    props = {**_carried(message), **_origin(message), **held, DELAY_TIME: str(int(remaining_s * 1000))}
    return publisher.send_retry(message.data, props, remaining_s, source_topic=message.topic)


def dead_letter_copy(message: Received, reason: str, last_error: str, undecodable: bool = False,
                     seal: Seal | None = None) -> Outgoing:
    """Dead-letter, step one: the copy for the DLQ with why (the caller acks the original once receipted).

    The copy always fits: a body over :data:`MAX_DLQ_BODY` is truncated and
    flagged with the original size and SHA-256, and the undecodable bytes go to
    ``payloadBase64`` only when small (the body holds them anyway).  Its reason, last error and
    count are sealed with the body as stored, under ``seal``'s key (:class:`~..rules.seal.ParkedSeal`):
    ``dlq list`` shows them only then."""
    data = message.data
    reason, last_error, count = reason[:200], last_error[:2000], attempts(message)
    props = {**_carried(message), **_origin(message), DLQ_REASON: reason, DLQ_LAST_ERROR: last_error,
             RECONSUMETIMES: str(count)}
    if undecodable and len(data) <= MAX_BASE64_SOURCE:
        props[DLQ_PAYLOAD_BASE64] = base64.b64encode(data).decode()
    if len(data) > MAX_DLQ_BODY:
        props[DLQ_PAYLOAD_TRUNCATED] = "true"
        props[DLQ_PAYLOAD_SIZE] = str(len(data))
        props[DLQ_PAYLOAD_SHA256] = hashlib.sha256(data).hexdigest()
        data = data[:MAX_DLQ_BODY]
    parked_seal = ParkedSeal.sharing(seal).seal(reason, last_error, count, message.topic, data)
    if parked_seal is not None:
        props[PARKED_SEAL] = parked_seal
    return Outgoing(data, props, source_topic=message.topic)
