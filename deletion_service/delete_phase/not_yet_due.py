"""RETRY messages held in memory until their delay has passed (the embedded broker ignores delayed delivery).

Bounded by the worker: when the set is full, a message due sooner takes the place of the one
due last, which the worker hands back to RETRY with the delay it has left, so a
flood of far-future messages cannot keep a due one waiting.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator

from deletion_service.delete_phase.lifecycle import Disposal


class NotYetDue:
    """A heap of not-yet-due disposals by due time (ties in arrival order)."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Disposal]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Disposal]:
        return (d for _, _, d in self._heap)

    def until_ms(self) -> int | None:
        """When the last held message falls due (ms), if any is held."""
        return max(due for due, _, _ in self._heap) if self._heap else None

    def add(self, d: Disposal) -> None:
        heapq.heappush(self._heap, (d.due_ms, next(self._seq), d))

    def pop_due(self, now_ms: int, limit: int) -> list[Disposal]:
        out = []
        while self._heap and self._heap[0][0] <= now_ms and len(out) < limit:
            out.append(heapq.heappop(self._heap)[2])
        return out

    def latest(self) -> Disposal:
        """The one due last (the newest of equals): what a full set hands back."""
        return max(self._heap, key=lambda e: (e[0], e[1]))[2]

    def remove(self, d: Disposal) -> None:
        self._heap = [e for e in self._heap if e[2] is not d]
        heapq.heapify(self._heap)
