"""Not-yet-due RETRY messages set aside: left unacked with the broker, only their due times and labels kept.

The second tier of the held set (:mod:`.not_yet_due`): what memory cannot hold.  The broker keeps
each message for this consumer and delivers nothing of it until asked (``Consumer.redeliver_unacked``,
which the intake does when room is made or the first of them falls due); a reconnect delivers them
too.  Either way a delivered copy is no longer aside (:meth:`SetAside.returned`).  What is kept here
is what the ``held`` gauge, ``status`` and the intake's pacing need: how many, from which topic,
for which reason, and when the first and the last fall due.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass

from deletion_service.protocol.fate import HoldReason

#: (topic, message id): one message, whichever copy of it the broker delivered
Key = tuple[str, str]


@dataclass(frozen=True)
class HeldLabel:
    """What a held message's label says, read (and its seal checked) once, when it is first held:
    the gauge and ``status`` read it on every scrape."""

    due_ms: int
    reason: HoldReason
    why: str


class SetAside:
    """Messages left unacked with the broker until asked for again: key -> label, with the soonest due
    in a heap (entries made stale by a return are skipped lazily)."""

    def __init__(self) -> None:
        self._labels: dict[Key, HeldLabel] = {}
        self._soonest: list[tuple[int, Key]] = []  # (due, key): min-heap
        self._by_topic: Counter[str] = Counter()
        self.reasons: Counter[HoldReason] = Counter()
        self._last_ms: int | None = None  # when the last falls due (at most: a return leaves it)

    def __len__(self) -> int:
        return len(self._labels)

    def __contains__(self, key: Key) -> bool:
        return key in self._labels

    def labels(self) -> list[HeldLabel]:
        """A copy, taken at once: ``status`` reads it on the admin API's thread while the worker's changes it
        (``list`` of a dict's values runs without a Python step between, so no change can land midway)."""
        return list(self._labels.values())

    def add(self, key: Key, label: HeldLabel) -> None:
        self.returned(key)
        self._labels[key] = label
        self._by_topic[key[0]] += 1
        self.reasons[label.reason] += 1
        heapq.heappush(self._soonest, (label.due_ms, key))
        self._last_ms = label.due_ms if self._last_ms is None else max(label.due_ms, self._last_ms)

    def topics(self) -> set[str]:
        """The topics messages are set aside from (each holds them unacked with the broker)."""
        return set(self._by_topic)

    def count(self, topic: str | None = None) -> int:
        """How many are set aside (from ``topic``, if given)."""
        return len(self._labels) if topic is None else self._by_topic.get(topic, 0)

    def soonest_ms(self) -> int | None:
        """When the first falls due (ms), if any is set aside."""
        heap = self._soonest
        while heap and (heap[0][1] not in self._labels or self._labels[heap[0][1]].due_ms != heap[0][0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def last_ms(self) -> int | None:
        return self._last_ms

    def returned(self, key: Key) -> None:
        """A copy of this message was delivered again: it is no longer aside (if it was)."""
        label = self._labels.pop(key, None)
        if label is None:
            return
        self.reasons[label.reason] -= 1
        self._by_topic[key[0]] -= 1
        if not self._by_topic[key[0]]:
            del self._by_topic[key[0]]
        if not self._labels:
            self.clear()
        elif len(self._soonest) > 2 * len(self._labels) + 64:
            self._soonest[:] = [(lb.due_ms, k) for k, lb in self._labels.items()]
            heapq.heapify(self._soonest)

    def clear(self) -> None:
        """Every one was asked for again: the broker delivers each anew."""
        self._labels.clear()
        self._soonest.clear()
        self._by_topic.clear()
        self.reasons.clear()
        self._last_ms = None
