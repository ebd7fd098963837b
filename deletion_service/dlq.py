"""The dead-letter queue, for operators: list (reads, never acks), purge (acks), requeue (republishes, then acks).

**Listing never takes anything.**  It reads the DLQ topic with a Reader (its own non-durable
cursor), not through the ``ledger-deletion-dlq`` subscription: a consumer that lists holds the
messages dispatched to it, so two listings at once (an operator and the admin API) each saw
part of the DLQ, often none of it.

**Settled requests are recorded in the topic.**  A reader sees every stored message, settled
or not, and a client cannot see a subscription's acks (real Pulsar shows them only through
admin REST, pulsar-lite not at all).  Purge and requeue are what ack the DLQ subscription, so
after acking they append a *settlement marker* to the DLQ topic itself (payload: the settled
ids) and ack the marker too, so the subscription's backlog — the ``dlq_size`` gauge — never
counts it.  A listing drops markers and the messages they name.  The marker lives after the
messages it settles, so the broker never trims it while they remain.

**Order, and what a crash leaves.**  Ack the selected messages, then send the marker, then ack
the marker.  A crash after the first step leaves settled messages listed (purging them again is
harmless: an ack is idempotent); after the second, a marker counted in the backlog until the
next purge or requeue, which acks every marker it reads.  Requeue republishes before it acks,
so a crash can duplicate a request (the daemon handles a repeat), never lose one.

**What is acted on** is exactly what a :class:`Selection` names among the requests listed at
that moment — message ids as ``dlq list`` prints them (``L:E``), ``--reason``, ``--older-than``,
or everything listed — never whatever arrives while it runs.  A requeued request gets a fresh
retry budget (its retry properties are dropped) because an operator requeues after fixing the
cause.  A subscription acked by other means (``pulsar-admin topics clear-backlog``) leaves no
marker, so its messages stay listed.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from deletion_service.broker.interface import BrokerClient, Received, display_message_id
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
#: The property that makes a DLQ message a settlement marker (value: why it settled them).
MARKER_PROPERTY = "ledgerDeletionSettled"


@dataclass
class DlqEntry:
    message_id: str  # L:E, as operators type it back to purge or requeue
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


@dataclass(frozen=True)
class Selection:
    """Which listed requests to act on: those with these ids (if any given) that also match every
    filter given.  ``everything`` must be said explicitly; an empty selection selects nothing."""

    message_ids: frozenset[str] = frozenset()
    reason: str | None = None
    published_before_ms: int | None = None
    everything: bool = False

    @property
    def empty(self) -> bool:
        return not (self.message_ids or self.reason or self.published_before_ms is not None or self.everything)

    def matches(self, e: DlqEntry) -> bool:
        if self.empty:
            return False
        return ((not self.message_ids or e.message_id in self.message_ids)
                and (self.reason is None or e.reason == self.reason)
                and (self.published_before_ms is None or e.published_ms < self.published_before_ms))


class UnknownMessageIds(Exception):
    """Ids the operator named that are not parked (any more): nothing was done."""

    def __init__(self, missing: list[str]) -> None:
        super().__init__(f"not in the DLQ: {', '.join(missing)} (run 'dlq list' again; nothing was changed)")
        self.missing = missing


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
    return DlqEntry(display_message_id(message.message_id), message.publish_time_ms, props.get(DLQ_REASON, ""),
                    props.get(DLQ_LAST_ERROR, ""), attempts, request, payload)


@dataclass
class Snapshot:
    """The DLQ topic as one read saw it: parked messages (oldest first) and the markers read."""

    parked: list[Received] = field(default_factory=list)
    markers: list[str] = field(default_factory=list)

    def entries(self) -> list[tuple[DlqEntry, Received]]:
        return [(entry(m), m) for m in self.parked]


def snapshot(broker: BrokerClient, topics: DeletionTopics) -> Snapshot:
    stored = broker.read_all(topics.dlq)
    settled: set[str] = set()
    out = Snapshot()
    for message in stored:
        if MARKER_PROPERTY in message.properties:
            out.markers.append(display_message_id(message.message_id))
            settled.update(_marker_ids(message.data))
    out.parked = [m for m in stored if MARKER_PROPERTY not in m.properties
                  and display_message_id(m.message_id) not in settled]
    return out


def _marker_ids(data: bytes) -> list[str]:
    try:
        ids = json.loads(data).get("settled", [])
    except (ValueError, AttributeError):
        return []  # not one of ours after all: settles nothing
    return [str(i) for i in ids] if isinstance(ids, list) else []


def list_dlq(broker: BrokerClient, topics: DeletionTopics, limit: int | None = None,
             selection: Selection | None = None) -> list[DlqEntry]:
    """The parked requests, oldest first (only those ``selection`` names, when given)."""
    entries = [e for e, _ in snapshot(broker, topics).entries() if selection is None or selection.matches(e)]
    return entries if limit is None else entries[:limit]


def _select(snap: Snapshot, selection: Selection) -> list[tuple[DlqEntry, Received]]:
    chosen = [(e, m) for e, m in snap.entries() if selection.matches(e)]
    missing = sorted(selection.message_ids - {e.message_id for e, _ in snap.entries()})
    if missing:
        raise UnknownMessageIds(missing)
    return chosen


def _settle(broker: BrokerClient, topics: DeletionTopics, ids: list[str], stray_markers: Iterable[str],
            why: str) -> None:
    """Ack, then record, then ack the record (see the module's docstring for the order)."""
    broker.acknowledge(topics.dlq, topics.dlq_subscription, [*ids, *stray_markers])
    if not ids:
        return
    producer = broker.producer(topics.dlq)
    try:
        marker = producer.send(json.dumps({"settled": ids}).encode(), {MARKER_PROPERTY: why})
    finally:
        producer.close()
    broker.acknowledge(topics.dlq, topics.dlq_subscription, [marker])


def purge(broker: BrokerClient, topics: DeletionTopics, selection: Selection,
          progress: Callable[[int], None] | None = None) -> list[DlqEntry]:
    """Ack the selected requests; their ledgers stay where they are."""
    snap = snapshot(broker, topics)
    chosen = [e for e, _ in _select(snap, selection)]
    _settle(broker, topics, [e.message_id for e in chosen], snap.markers, "purge")
    if progress:
        progress(len(chosen))
    return chosen


def requeue(broker: BrokerClient, topics: DeletionTopics, publisher: RequestPublisher, selection: Selection,
            progress: Callable[[int], None] | None = None) -> tuple[list[DlqEntry], list[DlqEntry]]:
    """Republish the selected decodable requests to their partition, then ack them; undecodable
    ones stay parked (returned second)."""
    snap = snapshot(broker, topics)
    moved: list[DlqEntry] = []
    kept: list[DlqEntry] = []
    for e, message in _select(snap, selection):
        try:
            request = decode(message.data)
        except InvalidRequest:
            kept.append(e)
            continue
        publisher.send_request(request)
        moved.append(e)
        if progress:
            progress(len(moved))
    _settle(broker, topics, [e.message_id for e in moved], snap.markers, "requeue")
    return moved, kept
