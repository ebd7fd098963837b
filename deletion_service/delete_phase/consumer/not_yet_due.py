"""RETRY messages held in memory until their delay has passed (the embedded broker ignores delayed delivery).

Bounded by the worker: when the set is full, a message due sooner takes the place of the one
due last, which the worker hands back to RETRY with the delay it has left, so a
flood of far-future messages cannot keep a due one waiting.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from deletion_service.broker.interface import Received
from deletion_service.delete_phase.rules.hold_reason import HoldSeal
from deletion_service.delete_phase.rules.lifecycle import MessageInHand
from deletion_service.protocol.fate import HoldReason


@dataclass(frozen=True)
class HeldGroup:
    """The requests held for one reason: how many, when the first and the last fall due (ms), and the
    decision's words for the first of them (e.g. which minimum age)."""

    reason: HoldReason
    count: int
    first_due_ms: int
    last_due_ms: int
    example: str


class NotYetDue:
    """A heap of not-yet-due disposals by due time (ties in arrival order)."""

    def __init__(self, seal: HoldSeal | None = None) -> None:
        #: reads back only the hold labels this tool sealed (a producer's label reads ``unknown``)
        self.seal = seal or HoldSeal(None)
        self._heap: list[tuple[int, int, MessageInHand]] = []
        self._seq = itertools.count()
        #: (topic, message id) of each held message -> the reason and words its label gives, read (and its
        #: seal checked) once, when it is added: the gauge and ``status`` read them on every scrape
        self._held: dict[tuple[str, str], tuple[HoldReason, str]] = {}

    def holds(self, message: Received) -> bool:
        """Whether this very message is held here already: a broker that restarts redelivers what
        its consumers had not acked, held messages included."""
        return (message.topic, message.message_id) in self._held

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[MessageInHand]:
        return (d for _, _, d in self._heap)

    def until_ms(self) -> int | None:
        """When the last held message falls due (ms), if any is held."""
        return max(due for due, _, _ in self._heap) if self._heap else None

    def groups(self) -> list[HeldGroup]:
        """The held requests by why they wait (the reason their RETRY copy carries), soonest due first."""
        found: dict[HoldReason, list[tuple[int, str]]] = {}
        for due, _, d in self._heap:
            reason, why = self._held[_key(d)]
            found.setdefault(reason, []).append((due, why))
        out = []
        for reason, held in found.items():
            dues = [due for due, _ in held]
            out.append(HeldGroup(reason, len(held), min(dues), max(dues), min(held, key=lambda e: e[0])[1]))
        return sorted(out, key=lambda g: g.first_due_ms)

    def by_reason(self) -> dict[HoldReason, int]:
        """How many are held for each reason (every reason named, 0 included: the ``held`` gauge)."""
        counts = dict.fromkeys(HoldReason, 0)
        for _, _, d in self._heap:
            counts[self._held[_key(d)][0]] += 1
        return counts

    def overdue(self, before_ms: int) -> int:
        """How many fell due before ``before_ms`` and are still here (the worker takes due ones first)."""
        return sum(1 for due, _, _ in self._heap if due < before_ms)

    def add(self, d: MessageInHand) -> None:
        heapq.heappush(self._heap, (d.due_ms, next(self._seq), d))
        self._held[_key(d)] = self.seal.read(d.message.properties, d.message.data)

    def pop_due(self, now_ms: int, limit: int) -> list[MessageInHand]:
        out = []
        while self._heap and self._heap[0][0] <= now_ms and len(out) < limit:
            d = heapq.heappop(self._heap)[2]
            self._held.pop(_key(d), None)
            out.append(d)
        return out

    def latest(self) -> MessageInHand:
        """The one due last (the newest of equals): what a full set hands back."""
        return max(self._heap, key=lambda e: (e[0], e[1]))[2]

    def remove(self, d: MessageInHand) -> None:
        self._heap = [e for e in self._heap if e[2] is not d]
        heapq.heapify(self._heap)
        self._held.pop(_key(d), None)


def _key(d: MessageInHand) -> tuple[str, str]:
    return d.message.topic, d.message.message_id
