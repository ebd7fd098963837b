"""Departures waiting out the settle delay. Pure.

A broker's own delete normally finishes within seconds of its metadata write; a departure still
present after ``settle_s`` is a leak.  Until then it waits here, keyed by what its requests would
delete: seen departing again, it keeps its first time (the delay runs from the first sight); seen
referenced again (a ledger re-listed), it is dropped, since a referenced ledger is no leak; while
its topic cannot be read, it waits on.  What is due is handed out once, oldest first; the caller checks storage and
sends.

A request for a BookKeeper copy waits as its field values only (a tuple, a few hundred bytes
instead of the model's kilobyte: at a thousand departures a second and a settle delay of minutes,
a hundred thousand wait at once) and is built again from them, as it was, when it is handed out.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from deletion_service.leak_watcher.departures import Departure, copy_key
from deletion_service.leak_watcher.sightings import Reading
from deletion_service.protocol.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo, Reason


class _Plain(NamedTuple):
    """A validated request without an offload context, as its field values."""

    topic_name: str
    ledger_component: LedgerComponent
    cursor_name: str | None
    schema_id: str | None
    ledger_type: LedgerType
    ledger_id: int
    marked_at: int
    reason: Reason


def _kept(request: PendingDeleteLedgerInfo) -> _Plain | PendingDeleteLedgerInfo:
    if request.offload_context is not None or type(request) is not PendingDeleteLedgerInfo:
        return request
    return _Plain(request.topic_name, request.ledger_component, request.cursor_name, request.schema_id,
                  request.ledger_type, request.ledger_id, request.marked_at, request.reason)


def _request(kept: _Plain | PendingDeleteLedgerInfo) -> PendingDeleteLedgerInfo:
    if isinstance(kept, PendingDeleteLedgerInfo):
        return kept
    return PendingDeleteLedgerInfo(offload_context=None, **kept._asdict())


@dataclass
class SettleQueue:
    settle_s: float
    _since: dict[tuple[int, str], tuple[float, _Plain | PendingDeleteLedgerInfo]] = field(default_factory=dict)
    _order: list[tuple[float, tuple[int, str]]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self._since)

    def add(self, departures: list[Departure], now: float) -> None:
        for departure in departures:
            for request in departure.requests:
                key = copy_key(request)
                if key not in self._since:
                    self._since[key] = (now, _kept(request))
                    heapq.heappush(self._order, (now, key))

    def waiting(self) -> list[tuple[float, PendingDeleteLedgerInfo]]:
        """Every waiting departure as (first seen, its request), oldest first: what is kept across a restart."""
        return [(since, _request(kept)) for since, kept in sorted(self._since.values(), key=lambda entry: entry[0])]

    def restore(self, waiting: list[tuple[float, PendingDeleteLedgerInfo]]) -> None:
        """Wait for these again, each from the time it was first seen (a hand-over does not restart the delay)."""
        for since, request in waiting:
            key = copy_key(request)
            if key not in self._since or self._since[key][0] > since:
                self._since[key] = (since, _kept(request))
                heapq.heappush(self._order, (since, key))

    def drop_referenced(self, reading: Reading) -> int:
        """Forget every waiting departure ``reading`` references again; how many.  One whose topic this
        reading could not read stays (it is held back by :meth:`due` instead): forgotten, it would never
        depart again, since the topic's sightings carried over are those that already lack it."""
        ledgers, parts = reading.referenced_among({key[0] for key in self._since if not key[1]},
                                                  {key for key in self._since if key[1]})
        gone = [key for key in self._since if (key[0] in ledgers if not key[1] else key in parts)]
        for key in gone:
            del self._since[key]
        return len(gone)

    def due(self, now: float, readable: Callable[[str], bool] = lambda _: True) -> list[PendingDeleteLedgerInfo]:
        """Every request whose departure is at least ``settle_s`` old, oldest first, each once.  One whose
        topic is not ``readable`` now waits on (a failed read is no evidence either way)."""
        out, held = [], []
        while self._order and self._order[0][0] <= now - self.settle_s:
            since, key = heapq.heappop(self._order)
            entry = self._since.get(key)
            if entry is None or entry[0] != since:
                continue
            if not readable(entry[1].topic_name):
                held.append((since, key))
                continue
            del self._since[key]
            out.append(_request(entry[1]))
        for item in held:
            heapq.heappush(self._order, item)
        return out
