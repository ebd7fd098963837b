"""Orphan ledgers → ``reason: orphan`` deletion requests, through the mark phase's producer half.

The scan only proposes: every request is re-verified by the delete phase (BookKeeper's
own metadata must name the request's topic/cursor/schema, the ledger must be CLOSED
and older than ``minLedgerAgeSeconds``, and referenced nowhere) before anything is
deleted.  So a request is built from what the ledger's *own* metadata says, never
from a guess: an orphan that names no topic, or whose kind has no request type in
the protocol (compacted-topic ledgers), is reported and left alone.

Rows stream to the driver one Spark partition at a time (``toLocalIterator``) and
are sent in batches of bounded size, so enqueueing ten million orphans needs no
more driver memory than one partition.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame

from deletion_service.model import (
    InvalidRequest,
    LedgerComponent,
    LedgerType,
    PendingDeleteLedgerInfo,
    Reason,
    decode_payload,
)
from deletion_service.orphans.batching import batched
from metastore.formats.custom_metadata import COMPONENT_MANAGED_LEDGER, COMPONENT_SCHEMA

#: Requests built and sent per batch; progress is reported after each.
BATCH_SIZE = 500


@dataclass
class EnqueueResult:
    sent: int = 0
    skipped: Counter[str] = field(default_factory=Counter)  # why → how many orphans were not enqueued

    def to_json(self) -> dict[str, Any]:
        return {"sent": self.sent, "skipped": dict(self.skipped)}


def request_for(row: Mapping[str, Any], marked_at_ms: int) -> PendingDeleteLedgerInfo | str:
    """The request for one orphan-ledger row, or why there is none."""
    component = row.get("component")
    if component == COMPONENT_SCHEMA:
        kind, extra = LedgerComponent.SCHEMA_STORAGE, {"schemaId": row.get("schemaId")}
    elif component == COMPONENT_MANAGED_LEDGER and row.get("cursor") is not None:
        kind, extra = LedgerComponent.MANAGED_CURSOR, {"cursorName": row.get("cursor")}
    elif component == COMPONENT_MANAGED_LEDGER:
        kind, extra = LedgerComponent.MANAGED_LEDGER, {}
    else:
        return f"no request type for component {component!r}"
    if row.get("topic") is None:
        return "its metadata names no topic"
    body = {"topicName": row["topic"], "ledgerComponent": kind.value, "ledgerType": LedgerType.LEDGER.value,
            "ledgerId": row["ledgerId"], **extra}
    try:
        payload = decode_payload(body)
    except InvalidRequest as e:
        return f"invalid request: {e}"
    return PendingDeleteLedgerInfo(**payload.model_dump(), marked_at=marked_at_ms, reason=Reason.ORPHAN)


def enqueue_orphans(orphans: DataFrame, send: Callable[[PendingDeleteLedgerInfo], str],
                    progress: Callable[[int], None] | None = None,
                    clock: Callable[[], float] = time.time) -> EnqueueResult:
    """Send a request for every orphan ledger ``orphans`` holds (columns of ``ORPHAN_LEDGERS``).

    A broker failure stops the run with what was sent so far in the exception's notes;
    re-running is safe: the delete phase treats a second request for a gone ledger as
    already absent."""
    result = EnqueueResult()
    marked_at = int(clock() * 1000)
    rows = (row.asDict() for row in orphans.toLocalIterator())
    for batch in batched(rows, BATCH_SIZE):
        for row in batch:
            request = request_for(row, marked_at)
            if isinstance(request, str):
                result.skipped[request] += 1
                continue
            try:
                send(request)
            except Exception as e:
                e.add_note(f"sent {result.sent} orphan request(s) before the failure")
                raise
            result.sent += 1
        if progress is not None:
            progress(result.sent + sum(result.skipped.values()))
    return result
