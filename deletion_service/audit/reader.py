"""Select records for ``ledger-deletion audit``: by ledger, by topic, since when, by outcome; newest first, the
last N.

Reads the trail as it is and judges nothing: a line that is not a record is
skipped here (and counted), because finding damage is ``verify.py``'s job and a
query should still answer from the records that are whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deletion_service.audit import record, trail


@dataclass(frozen=True)
class Query:
    ledger_id: int | None = None
    topic: str | None = None  # normalized: persistent://tenant/ns/name
    since_ms: int | None = None
    outcomes: frozenset[str] | None = None  # the records' ``outcome`` values (Outcome's)

    def matches(self, rec: dict[str, Any]) -> bool:
        request = rec.get("request") or {}
        if self.outcomes is not None and rec.get("outcome") not in self.outcomes:
            return False
        if self.ledger_id is not None and request.get("ledgerId") != self.ledger_id:
            return False
        if self.topic is not None and request.get("topicName") != self.topic:
            return False
        return self.since_ms is None or (isinstance(rec.get("at"), int) and rec["at"] >= self.since_ms)


@dataclass
class Selection:
    records: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0  # lines that are not records


def records(directory: Path) -> Iterator[dict[str, Any] | None]:
    """Every line of the trail in order, as a record (None for a line that is not one)."""
    for _, path in trail.files(directory):
        for _, raw, _ in trail.lines(path):
            try:
                yield record.parse(raw)
            except ValueError:
                yield None


def parsed(lines: Iterable[bytes]) -> Iterator[dict[str, Any] | None]:
    """Lines from anywhere (the ``-AUDIT`` topic's messages: one line each), as records (None: not one)."""
    for raw in lines:
        try:
            yield record.parse(raw)
        except ValueError:
            yield None


def select(directory: Path, query: Query, newest_first: bool = False, limit: int | None = None) -> Selection:
    return select_from(records(directory), query, newest_first, limit)


def select_from(found: Iterable[dict[str, Any] | None], query: Query, newest_first: bool = False,
                limit: int | None = None) -> Selection:
    """The matching records in trail order, or newest first; with ``limit``, the last ``limit`` of them
    (the newest: ``--limit 10`` answers "what happened lately", whichever order they are printed in)."""
    out = Selection()
    for rec in found:
        if rec is None:
            out.skipped += 1
        elif query.matches(rec):
            out.records.append(rec)
    if limit is not None:
        out.records = out.records[-limit:] if limit > 0 else []
    if newest_first:
        out.records.reverse()
    return out
