"""Orphans → ``reason: orphan`` deletion requests, through the mark phase's producer half.

The scan only proposes: every request is re-verified by the delete phase (BookKeeper's
own metadata must name the request's topic/cursor/schema/compacted topic, the ledger
must be CLOSED and older than ``minLedgerAgeSeconds``, and referenced nowhere; an
offloaded object's index must name the request's topic, and no offload context may
name its uuid) before anything is deleted.  So a request is built from what the
orphan's *own* metadata says, never from a guess: an orphan that names no topic, or
whose kind has no request type (a Pulsar component we do not know, a streaming-offload
segment, whose ledgers only its index names), is reported and left alone.

Every kind of ledger the reference model knows has its request type (compacted and
delayed-bucket ledgers through our two components PIP-186 lacks); an orphan offloaded
object — objects under a uuid no offload context names, e.g. the leftovers of a failed
earlier offload whose ledger is still listed — becomes an ``OFFLOAD_LEDGER`` request for
that (ledger, uuid) at the location it was found in.

Rows stream to the driver one Spark partition at a time (``toLocalIterator``) and
are sent in batches of bounded size, so enqueueing ten million orphans needs no
more driver memory than one partition.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, assert_never

from pyspark.sql import DataFrame

from deletion_service.orphans.batching import batched
from deletion_service.orphans.inventory.locations import OffloadScope
from deletion_service.protocol.references import LedgerKind
from deletion_service.protocol.request import (
    InvalidRequest,
    LedgerComponent,
    LedgerType,
    PendingDeleteLedgerInfo,
    Reason,
    decode_payload,
)

#: Requests built and sent per batch; progress is reported after each.
BATCH_SIZE = 500

#: The request component of each kind of ledger (``other``: none, reported and left alone).
COMPONENTS: Mapping[str, LedgerComponent] = {
    LedgerKind.DATA.value: LedgerComponent.MANAGED_LEDGER,
    LedgerKind.CURSOR.value: LedgerComponent.MANAGED_CURSOR,
    LedgerKind.SCHEMA.value: LedgerComponent.SCHEMA_STORAGE,
    LedgerKind.COMPACTED.value: LedgerComponent.COMPACTED_LEDGER,
    LedgerKind.DELAYED_BUCKET.value: LedgerComponent.DELAYED_INDEX_BUCKET,
}
#: ``EnqueueResult.by_kind`` key of offloaded-object requests.
OFFLOADED = "offloaded"


@dataclass
class EnqueueResult:
    sent: int = 0
    skipped: Counter[str] = field(default_factory=Counter)  # why → how many orphans were not enqueued
    by_kind: Counter[str] = field(default_factory=Counter)  # LedgerKind value or "offloaded" → requests sent

    def to_json(self) -> dict[str, Any]:
        return {"sent": self.sent, "skipped": dict(self.skipped), "byKind": dict(self.by_kind)}


def request_for(row: Mapping[str, Any], marked_at_ms: int) -> PendingDeleteLedgerInfo | str:
    """The request for one orphan-ledger row (columns of ``ORPHAN_LEDGERS``), or why there is none."""
    kind = row.get("kind")
    component = COMPONENTS.get(kind or "")
    if component is None:
        return f"no request type for component {row.get('component')!r}"
    if row.get("topic") is None:
        return "its metadata names no topic"
    body = {"topicName": row["topic"], "ledgerComponent": component.value, "ledgerType": LedgerType.LEDGER.value,
            "ledgerId": row["ledgerId"], **_component_fields(component, row)}
    return _request(body, marked_at_ms)


def _component_fields(component: LedgerComponent, row: Mapping[str, Any]) -> dict[str, Any]:
    """The request fields only ``component`` has (its schema or its cursor)."""
    match component:
        case LedgerComponent.SCHEMA_STORAGE:
            return {"schemaId": row.get("schemaId")}
        case LedgerComponent.MANAGED_CURSOR | LedgerComponent.DELAYED_INDEX_BUCKET:
            return {"cursorName": row.get("cursor")}
        case LedgerComponent.MANAGED_LEDGER | LedgerComponent.COMPACTED_LEDGER:
            return {}
        case _:
            assert_never(component)


def object_request_for(row: Mapping[str, Any], scope: OffloadScope, marked_at_ms: int) -> PendingDeleteLedgerInfo | str:
    """The ``OFFLOAD_LEDGER`` request for one orphan (location, uuid, ledger) of ``ORPHAN_OBJECTS``
    (its data and index objects are one request), or why there is none.  The driver and its
    metadata name the location the objects were *found* in, so "absent" means absent there."""
    if row.get("ledgerId") is None:
        return "streaming-offload segment: only its index names its ledgers"
    if row.get("topic") is None:
        return "offloaded object: nothing names its topic"
    where = scope.parse(row["location"])
    if where is None:
        return f"offloaded object at {row['location']}: driver not implemented"
    msb, lsb = java_halves(row["uuid"])
    body = {"topicName": row["topic"], "ledgerComponent": LedgerComponent.MANAGED_LEDGER.value,
            "ledgerType": LedgerType.OFFLOAD_LEDGER.value, "ledgerId": row["ledgerId"],
            "offloadContext": {"uidMsb": msb, "uidLsb": lsb, "driverName": where.driver,
                               "driverMetadata": dict(where.metadata)}}
    return _request(body, marked_at_ms)


def java_halves(text: str) -> tuple[int, int]:
    """``java.util.UUID``'s signed (msb, lsb) of its text form (the inverse of ``java_uuid``)."""
    value = uuid.UUID(text).int
    msb, lsb = value >> 64, value & 0xFFFF_FFFF_FFFF_FFFF
    return tuple(h - (1 << 64) if h >= 1 << 63 else h for h in (msb, lsb))  # type: ignore[return-value]


def _request(body: dict[str, Any], marked_at_ms: int) -> PendingDeleteLedgerInfo | str:
    try:
        payload = decode_payload(body)
    except InvalidRequest as e:
        return f"invalid request: {e}"
    return PendingDeleteLedgerInfo(**payload.model_dump(), marked_at=marked_at_ms, reason=Reason.ORPHAN)


def enqueue_orphans(orphans: DataFrame, send: Callable[[PendingDeleteLedgerInfo], str],
                    progress: Callable[[int], None] | None = None,
                    clock: Callable[[], float] = time.time,
                    objects: DataFrame | None = None, scope: OffloadScope | None = None) -> EnqueueResult:
    """Send a request for every orphan ledger ``orphans`` holds (columns of ``ORPHAN_LEDGERS``), then,
    given ``objects`` (``ORPHAN_OBJECTS``) and the ``scope`` their locations are read with, one
    ``OFFLOAD_LEDGER`` request per orphan (location, uuid, ledger).

    A broker failure stops the run with what was sent so far in the exception's notes;
    re-running is safe: the delete phase treats a second request for a gone ledger as
    already absent."""
    result = EnqueueResult()
    marked_at = int(clock() * 1000)
    items: Iterable[tuple[str, PendingDeleteLedgerInfo | str]] = (
        (row.get("kind") or LedgerKind.OTHER.value, request_for(row, marked_at)) for row in _rows(orphans))
    if objects is not None:
        scope = scope or OffloadScope()
        distinct = objects.select("location", "uuid", "ledgerId", "topic").distinct()
        items = chain(items, ((OFFLOADED, object_request_for(row, scope, marked_at)) for row in _rows(distinct)))
    for batch in batched(items, BATCH_SIZE):
        for kind, request in batch:
            if isinstance(request, str):
                result.skipped[request] += 1
                continue
            try:
                send(request)
            except Exception as e:
                e.add_note(f"sent {result.sent} orphan request(s) before the failure")
                raise
            result.sent += 1
            result.by_kind[kind] += 1
        if progress is not None:
            progress(result.sent + sum(result.skipped.values()))
    return result


def _rows(df: DataFrame) -> Iterator[dict[str, Any]]:
    return (row.asDict() for row in df.toLocalIterator())
