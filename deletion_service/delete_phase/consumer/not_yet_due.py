"""RETRY messages held until their delay has passed (the embedded broker ignores delayed delivery).

Two tiers, both unacked, both counted as held:

* **in memory** (bounded by the worker's ``Limits.max_not_yet_due``): the messages due soonest, in
  a heap by due time with a second heap by due time reversed, so taking the due ones, finding the
  one due last and removing it each cost O(log n), whatever the set holds: a flood of far-future
  messages makes every arrival an eviction, and an eviction that scanned the set made the flood
  cost every other tenant's requests a pass of it each;
* **set aside** (:mod:`.set_aside`): messages due later than everything in memory, left unacked
  with the broker and not kept here (only their due time and label, for the gauges and for when
  to ask for them again).  The broker keeps them for this consumer and does not hand them straight
  back, as it would a copy republished to RETRY; the intake asks for them again
  (``Consumer.redeliver_unacked``) when room is made or the first of them falls due.

Invariant: nothing set aside is due sooner than anything held in memory, so the memory tier
is always the soonest-due share and a set-aside message is asked back before it falls due.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from deletion_service.broker.interface import Received
from deletion_service.delete_phase.consumer.set_aside import HeldLabel, Key, SetAside
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
    """Not-yet-due RETRY messages: the soonest in memory (a double-ended heap by due time, ties in
    arrival order), the rest set aside with the broker (:attr:`aside`: their due times and labels)."""

    def __init__(self, seal: HoldSeal | None = None) -> None:
        #: reads back only the hold labels this tool sealed (a producer's label reads ``unknown``)
        self.seal = seal or HoldSeal(None)
        self.aside = SetAside()
        self._seq = itertools.count()
        #: arrival number -> the message held in memory; each heap's entries name one, or one removed since
        self._live: dict[int, MessageInHand] = {}
        self._soonest: list[tuple[int, int]] = []  # (due, seq): min-heap
        self._latest: list[tuple[int, int]] = []  # (-due, -seq): the one due last (the newest of equals) on top
        self._held: dict[Key, tuple[int, HeldLabel]] = {}  # in memory: key -> (seq, label)
        self._reasons: Counter[HoldReason] = Counter()  # in memory

    # ---- both tiers

    def holds(self, message: Received) -> bool:
        """Whether this very message is held in memory already: a broker that restarts redelivers what
        its consumers had not acked, held messages included."""
        return (message.topic, message.message_id) in self._held

    def held_total(self) -> int:
        """Every message held, in memory or set aside (``status``, the summary, ``--exit-when-idle``)."""
        return len(self._held) + len(self.aside)

    def until_ms(self) -> int | None:
        """When the last held message falls due (ms), if any is held."""
        last = [due for due in (self._peek_latest(), self.aside.last_ms()) if due is not None]
        return max(last) if last else None

    def groups(self) -> list[HeldGroup]:
        """The held requests by why they wait (the reason their RETRY copy carries), soonest due first."""
        found: dict[HoldReason, list[HeldLabel]] = {}
        in_memory = list(self._held.values())  # at once: the worker's thread changes it while status reads
        for label in itertools.chain((lb for _, lb in in_memory), self.aside.labels()):
            found.setdefault(label.reason, []).append(label)
        out = []
        for reason, labels in found.items():
            first = min(labels, key=lambda lb: lb.due_ms)
            out.append(HeldGroup(reason, len(labels), first.due_ms, max(lb.due_ms for lb in labels), first.why))
        return sorted(out, key=lambda g: g.first_due_ms)

    def by_reason(self) -> dict[HoldReason, int]:
        """How many are held for each reason (every reason named, 0 included: the ``held`` gauge)."""
        counts = dict.fromkeys(HoldReason, 0)
        for reason in HoldReason:
            counts[reason] = self._reasons[reason] + self.aside.reasons[reason]
        return counts

    def overdue(self, before_ms: int) -> int:
        """How many fell due before ``before_ms`` and are still here (the worker takes due ones first)."""
        return sum(1 for _, lb in list(self._held.values()) if lb.due_ms < before_ms) \
            + sum(1 for lb in self.aside.labels() if lb.due_ms < before_ms)

    def set_aside(self, d: MessageInHand) -> None:
        """Keep only ``d``'s due time and label (out of memory, if it was there): the message stays unacked
        with the broker until it is asked for again."""
        label = self._label(d)
        self.remove(d)
        self.aside.add(_key(d), label)

    # ---- in memory

    def __len__(self) -> int:
        """How many are held in memory (what ``Limits.max_not_yet_due`` bounds)."""
        return len(self._live)

    def __iter__(self) -> Iterator[MessageInHand]:
        return iter(list(self._live.values()))

    def add(self, d: MessageInHand) -> None:
        seq = next(self._seq)
        key = _key(d)
        label = self._label(d)
        self.aside.returned(key)  # a copy set aside, delivered again: one entry per message
        self._live[seq] = d
        self._held[key] = (seq, label)
        self._reasons[label.reason] += 1
        heapq.heappush(self._soonest, (d.due_ms, seq))
        heapq.heappush(self._latest, (-d.due_ms, -seq))

    def pop_due(self, now_ms: int, limit: int) -> list[MessageInHand]:
        out = []
        while len(out) < limit and (top := self._top(self._soonest)) is not None and top[0] <= now_ms:
            out.append(self._drop(heapq.heappop(self._soonest)[1]))
        return out

    def latest(self) -> MessageInHand:
        """The one due last (the newest of equals): what a full set lets go."""
        top = self._top(self._latest, sign=-1)
        if top is None:
            raise IndexError("nothing is held in memory")
        return self._live[-top[1]]

    def remove(self, d: MessageInHand) -> None:
        """No longer held in memory (handed back or set aside): O(1) here, its heap entries go lazily."""
        entry = self._held.get(_key(d))
        if entry is not None and self._live.get(entry[0]) is d:
            self._drop(entry[0])

    def _label(self, d: MessageInHand) -> HeldLabel:
        known = self._held.get(_key(d))
        if known is None:
            reason, why = self.seal.read(d.message.properties, d.message.data)
            return HeldLabel(d.due_ms, reason, why)
        return known[1]

    def _drop(self, seq: int) -> MessageInHand:
        d = self._live.pop(seq)
        _, label = self._held.pop(_key(d))
        self._reasons[label.reason] -= 1
        self._compact()
        return d

    def _top(self, heap: list[tuple[int, int]], sign: int = 1) -> tuple[int, int] | None:
        """The heap's top entry that still names a message in memory (removed ones are popped here)."""
        while heap and sign * heap[0][1] not in self._live:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def _peek_latest(self) -> int | None:
        top = self._top(self._latest, sign=-1)
        return -top[0] if top is not None else None

    def _compact(self) -> None:
        """Removed entries are skipped lazily; once they outnumber the live ones, each heap is rebuilt
        (O(n), at most once per n removals: O(1) amortized)."""
        live = len(self._live)
        for heap, sign in ((self._soonest, 1), (self._latest, -1)):
            if len(heap) > 2 * live + 64:
                heap[:] = [e for e in heap if sign * e[1] in self._live]
                heapq.heapify(heap)


def _key(d: MessageInHand) -> Key:
    return d.message.topic, d.message.message_id
