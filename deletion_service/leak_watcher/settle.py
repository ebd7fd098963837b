"""Departures waiting out the settle delay. Pure.

A broker's own delete normally finishes within seconds of its metadata write; a departure still
present after ``settle_s`` is a leak.  Until then it waits here, keyed by what its requests would
delete: seen departing again, it keeps its first time (the delay runs from the first sight); seen
referenced again (a ledger re-listed, a reading that had failed), it is dropped, since a referenced
ledger is no leak.  What is due is handed out once, oldest first; the caller checks storage and
sends.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from deletion_service.leak_watcher.departures import Departure, copy_key
from deletion_service.leak_watcher.sightings import Reading
from deletion_service.protocol.request import PendingDeleteLedgerInfo


@dataclass
class SettleQueue:
    settle_s: float
    _since: dict[tuple[int, str], tuple[float, PendingDeleteLedgerInfo]] = field(default_factory=dict)
    _order: list[tuple[float, tuple[int, str]]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self._since)

    def add(self, departures: list[Departure], now: float) -> None:
        for departure in departures:
            for request in departure.requests:
                key = copy_key(request)
                if key not in self._since:
                    self._since[key] = (now, request)
                    heapq.heappush(self._order, (now, key))

    def waiting(self) -> list[tuple[float, PendingDeleteLedgerInfo]]:
        """Every waiting departure as (first seen, its request), oldest first: what is kept across a restart."""
        return sorted(self._since.values(), key=lambda entry: entry[0])

    def restore(self, waiting: list[tuple[float, PendingDeleteLedgerInfo]]) -> None:
        """Wait for these again, each from the time it was first seen (a hand-over does not restart the delay)."""
        for since, request in waiting:
            key = copy_key(request)
            if key not in self._since or self._since[key][0] > since:
                self._since[key] = (since, request)
                heapq.heappush(self._order, (since, key))

    def drop_referenced(self, reading: Reading) -> int:
        """Forget every waiting departure ``reading`` references again (or cannot read); how many."""
        ledgers, parts = reading.referenced()
        gone = [key for key, (_, request) in self._since.items()
                if (key[0] in ledgers if not key[1] else (key[0], key[1]) in parts)
                or not reading.knows(request.topic_name)]
        for key in gone:
            del self._since[key]
        return len(gone)

    def due(self, now: float) -> list[PendingDeleteLedgerInfo]:
        """Every request whose departure is at least ``settle_s`` old, oldest first, each once."""
        out = []
        while self._order and self._order[0][0] <= now - self.settle_s:
            since, key = heapq.heappop(self._order)
            entry = self._since.get(key)
            if entry is not None and entry[0] == since:
                del self._since[key]
                out.append(entry[1])
        return out

