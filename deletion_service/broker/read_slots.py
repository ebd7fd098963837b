"""Which subscription a stored read takes on pulsar-lite, where a Reader costs the broker for good.

pulsar-lite 0.2.0 keeps the subscription of every Reader after it closes, and its time to create one
grows with what it keeps (measured: 300 readers on 300 topics took 1.7 s, then 2.4 s, 3.5 s and
5.8 s pass after pass; an unscoped ``dlq list`` over 2,000 namespaces, 41 s).  Subscribing again
under a name the topic already has costs about a millisecond.  So there a stored read subscribes
under one of :data:`SLOTS` fixed names (``ledger-deletion-read-<n>``), Exclusive, and never acks:
closing hands every message back, so the next read of that name starts from the first again.  On
real Pulsar a Reader's subscription is non-durable and leaves with it; there Readers stay.

**Two reads at once never share a name.**  A second Exclusive consumer is refused, and the client
takes the refusal for a disconnect and retries until its operation timeout.  So the slots come in
:data:`GROUPS` groups of :data:`PER_PROCESS`: a process claims a group for as long as it lives (a
short command group 0 when free, a daemon the last: commands one after another all read under
group 0's names, so a topic keeps one such subscription, whatever daemons run; processes at once
take one group each), and within it this registry hands each
read of a topic a slot no other read of that topic holds (more at once go on with Readers).  A
process that finds no free group, or a slot of its group held elsewhere, reads with Readers (that
topic, from then on).  Nothing else guards the name: anyone may subscribe under it and ack, and
pulsar-lite cannot seek a subscription back, so a read under a slot counts only when it received
every entry from the topic's first to its last (else a Reader reads it again).  Every DLQ and audit
topic so carries at most :data:`SLOTS` such subscriptions, one in the common case; none holds
anything from the subscriptions that settle requests.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

#: Groups of slots: processes reading at once are told apart this many ways.
GROUPS: Final = 8
#: Slots of one group: reads of one topic at once in one process (the daemon's gauge, its admin API).
PER_PROCESS: Final = 4
#: Names a topic's stored reads subscribe under on pulsar-lite.
SLOTS: Final = GROUPS * PER_PROCESS
PREFIX: Final = "ledger-deletion-read-"
#: How long a topic whose slot read was not whole (someone acked under the name) is read with Readers: a
#: client spoiling each slot as fast as a read drops it made every read of it wait for its first message
#: and then fall back.  Per topic: a tenant spoiling its own DLQ's slots must cost only its own reads
#: (process-wide, it sent every topic's reads to Readers, whose subscriptions pulsar-lite keeps).
SPOILED_PAUSE_S: Final = 60.0


def slot_name(slot: int) -> str:
    return f"{PREFIX}{slot}"


class ReadSlots:
    """The slots this process's stored reads hold, topic by topic."""

    def __init__(self, claim: Callable[[], int | None], clock: Callable[[], float] = time.monotonic) -> None:
        """``claim``: the group this process reads in, claimed for its life (None: no group is free),
        asked once, when first needed (it costs round trips)."""
        self._claim, self._clock = claim, clock
        self._spoiled: dict[str, float] = {}  # topic -> until when it is read with Readers
        self._claimed = False
        self._group: int | None = None
        self._held: dict[str, set[int]] = {}
        self._refused: set[str] = set()
        self._lock = threading.Lock()

    def take(self, topic: str) -> int | None:
        """A slot of this process's group no other read of ``topic`` here holds (None when all are held,
        when the process has no group, or when a slot of ``topic`` was found held elsewhere)."""
        with self._lock:
            if not self._claimed:
                self._group, self._claimed = self._claim(), True
            if self._group is None or topic in self._refused or self._clock() < self._spoiled.get(topic, 0.0):
                return None
            held = self._held.setdefault(topic, set())
            for slot in range(self._group * PER_PROCESS, (self._group + 1) * PER_PROCESS):
                if slot not in held:
                    held.add(slot)
                    return slot
            return None

    def give_back(self, topic: str, slot: int) -> None:
        with self._lock:
            held = self._held.get(topic)
            if held is not None:
                held.discard(slot)
                if not held:
                    del self._held[topic]

    def held_elsewhere(self, topic: str) -> None:
        """A slot of ``topic`` in this process's group is held by another process (one frozen, or
        anyone's consumer): ``topic`` is read with Readers from now on, without waiting for it again."""
        with self._lock:
            self._refused.add(topic)

    def spoiled(self, topic: str) -> None:
        """A read of ``topic`` under a slot was not whole (someone acked under its name, and the read dropped
        it): this process reads ``topic`` with Readers for :data:`SPOILED_PAUSE_S`."""
        with self._lock:
            now = self._clock()
            self._spoiled = {t: until for t, until in self._spoiled.items() if until > now}
            self._spoiled[topic] = now + SPOILED_PAUSE_S
