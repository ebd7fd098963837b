"""Audit trail records made in-process: an ``Entry`` for a ledger, a trail filled with ``n`` of them by
an ``AuditWriter`` (closed, as the daemon closes it when it stops), and the trail's files as lines."""

from __future__ import annotations

from pathlib import Path

from deletion_service.audit import trail
from deletion_service.audit.record import Entry
from deletion_service.audit.writer import AuditWriter

EVIDENCE = {"bkVersion": 3, "customMetadata": {"application": "pulsar"}, "references": [], "offloadObjects": []}


def entry(ledger_id: int, topic: str = "persistent://t/ns/a", outcome: str = "deleted") -> Entry:
    request = {"topicName": topic, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER",
               "ledgerId": ledger_id, "reason": "trim", "markedAt": 1}
    return Entry(request, outcome, outcome, EVIDENCE)


def fill(data_dir: Path, n: int, max_bytes: int = 64 * 1024 * 1024, start: int = 1) -> AuditWriter:
    writer = AuditWriter(trail.audit_dir(data_dir), max_bytes)
    for lid in range(start, start + n):
        assert writer.write(entry(lid)) is not None
    writer.close()  # as the daemon does when it stops: the last records durable, the anchor naming them
    return writer


def lines(data_dir: Path) -> list[tuple[Path, list[str]]]:
    return [(p, p.read_text().splitlines(keepends=True)) for _, p in trail.files(trail.audit_dir(data_dir))]
