"""The dead-letter queue, for operators: list (no ack), requeue (republish, then ack), purge (ack).

Everything goes through the ``ledger-deletion-dlq`` subscription, so what
``list`` shows is exactly what is still parked; ``requeue`` gives a request a
fresh retry budget (its retry properties are dropped) because an operator
requeues after fixing the cause.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass

from deletion_service.broker.interface import BrokerClient, Received
from deletion_service.delete_phase.dispose import (
    DELAY_TIME,
    DLQ_LAST_ERROR,
    DLQ_PAYLOAD_BASE64,
    DLQ_REASON,
    ORIGIN_MESSAGE_ID,
    REAL_TOPIC,
    RECONSUMETIMES,
)
from deletion_service.model import InvalidRequest, decode
from deletion_service.publisher import RequestPublisher
from deletion_service.topics import DeletionTopics

RETRY_PROPERTIES = (RECONSUMETIMES, DELAY_TIME, REAL_TOPIC, ORIGIN_MESSAGE_ID, DLQ_REASON, DLQ_LAST_ERROR,
                    DLQ_PAYLOAD_BASE64)


@dataclass
class DlqEntry:
    message_id: str
    published_ms: int
    reason: str
    last_error: str
    attempts: int
    request: dict | None  # the decoded request, None when undecodable
    payload_base64: str | None

    def to_json(self) -> dict:
        return {"messageId": self.message_id, "publishedAt": self.published_ms, "reason": self.reason,
                "lastError": self.last_error, "attempts": self.attempts, "request": self.request,
                "payloadBase64": self.payload_base64}


def entry(message: Received) -> DlqEntry:
    props = message.properties
    try:
        request = decode(message.data).model_dump(mode="json", by_alias=True)
        payload = None
    except InvalidRequest:
        request, payload = None, base64.b64encode(message.data).decode()
    try:
        attempts = int(props.get(RECONSUMETIMES, "0"))
    except ValueError:
        attempts = 0
    return DlqEntry(message.message_id, message.publish_time_ms, props.get(DLQ_REASON, ""),
                    props.get(DLQ_LAST_ERROR, ""), attempts, request, payload)


def _drain(broker: BrokerClient, topics: DeletionTopics, handle: Callable[[Received], bool] | None,
           limit: int | None, wait_s: float) -> list[DlqEntry]:
    broker.ensure_subscription(topics.dlq, topics.dlq_subscription)
    consumer = broker.consumer([topics.dlq], topics.dlq_subscription)
    out: list[DlqEntry] = []
    try:
        while limit is None or len(out) < limit:
            message = consumer.receive(wait_s)
            if message is None:
                break
            out.append(entry(message))
            if handle is not None and handle(message):
                consumer.ack(message)
    finally:
        consumer.close()  # unacked messages go back to the subscription
    return out


def list_dlq(broker: BrokerClient, topics: DeletionTopics, limit: int | None = None,
             wait_s: float = 1.5) -> list[DlqEntry]:
    return _drain(broker, topics, None, limit, wait_s)


def purge(broker: BrokerClient, topics: DeletionTopics, wait_s: float = 1.5,
          progress: Callable[[int], None] | None = None) -> list[DlqEntry]:
    count = 0

    def ack(_: Received) -> bool:
        nonlocal count
        count += 1
        if progress:
            progress(count)
        return True

    return _drain(broker, topics, ack, None, wait_s)


def requeue(broker: BrokerClient, topics: DeletionTopics, publisher: RequestPublisher, wait_s: float = 1.5,
            progress: Callable[[int], None] | None = None) -> tuple[list[DlqEntry], list[DlqEntry]]:
    """Republish decodable requests to their partition, then ack; undecodable ones stay parked."""
    kept: list[str] = []
    count = 0

    def republish(message: Received) -> bool:
        nonlocal count
        try:
            request = decode(message.data)
        except InvalidRequest:
            kept.append(message.message_id)
            return False
        publisher.send_request(request)
        count += 1
        if progress:
            progress(count)
        return True

    seen = _drain(broker, topics, republish, None, wait_s)
    return [e for e in seen if e.message_id not in kept], [e for e in seen if e.message_id in kept]
