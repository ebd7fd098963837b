"""How a received message leaves our hands: ack, reconsume later, or dead-letter.

Reconsume and dead-letter publish first and ack only after the broker's
receipt, so a crash in between duplicates a request (harmless: deletion is
idempotent) and never loses one.  Property names are the Java client's, so
tools built for Pulsar's retry/DLQ topics read ours.
"""

from __future__ import annotations

import base64

from deletion_service.broker.interface import Received
from deletion_service.publisher import RequestPublisher

RECONSUMETIMES = "RECONSUMETIMES"
DELAY_TIME = "DELAY_TIME"
REAL_TOPIC = "REAL_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
DLQ_REASON = "reason"
DLQ_LAST_ERROR = "lastError"
DLQ_PAYLOAD_BASE64 = "payloadBase64"


def attempts(message: Received) -> int:
    """How many times the request was already reconsumed (0 for a fresh one or a garbled count)."""
    try:
        return max(0, int(message.properties.get(RECONSUMETIMES, "0")))
    except ValueError:
        return 0


def due_at_ms(message: Received) -> int:
    """When a RETRY message may be processed: its publish time plus its ``DELAY_TIME``.

    The embedded broker ignores delayed delivery, so the consumer enforces it."""
    try:
        delay = int(message.properties.get(DELAY_TIME, "0"))
    except ValueError:
        delay = 0
    return message.publish_time_ms + max(0, delay)


def _origin(message: Received) -> dict[str, str]:
    return {
        REAL_TOPIC: message.properties.get(REAL_TOPIC, message.topic),
        ORIGIN_MESSAGE_ID: message.properties.get(ORIGIN_MESSAGE_ID, message.message_id),
    }


def publish_retry(publisher: RequestPublisher, message: Received, delay_s: float) -> str:
    """Reconsume later, step one: the copy on RETRY (the caller acks the original after this returns)."""
    props = {**message.properties, **_origin(message),
             RECONSUMETIMES: str(attempts(message) + 1), DELAY_TIME: str(int(delay_s * 1000))}
    return publisher.send_retry(message.data, props, delay_s)


def publish_dead_letter(publisher: RequestPublisher, message: Received, reason: str, last_error: str,
                        undecodable: bool = False) -> str:
    """Dead-letter, step one: the copy on the DLQ with why (the caller acks the original after this returns)."""
    props = {**message.properties, **_origin(message), DLQ_REASON: reason, DLQ_LAST_ERROR: last_error[:2000]}
    if undecodable:
        props[DLQ_PAYLOAD_BASE64] = base64.b64encode(message.data).decode()
    return publisher.send_dlq(message.data, props)
