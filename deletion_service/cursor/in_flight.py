"""The dispatcher's reads: at most one sequential and one replay read in flight, and what completing one delivers.

A read captures, when it starts, the cursor epoch and each consumer's epoch
(:class:`~.reads.InFlightRead`).  On completion it is discarded if the cursor
epoch moved meanwhile (PIP-269: an outdated read neither moves the cursor nor
delivers); otherwise each entry is routed (:mod:`.routing`) to a consumer
unless it is acked, delayed, or held back for a recently joined Key_Shared
consumer, in which case it goes to the redelivery set for a replay read.

Batch-index acks (PIP-54, ``batch_index_acks``): a delivery carries a batch's
acked indexes as ``ack_set``, the client skips them, and they cost no permits.
The ack-state budget: with ``budget.pause_dispatch``, no read starts while the
cursor's state, as last persisted, was over the budget.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from .ack_budget import PersistBudget
from .consumers import ConsumerSet
from .epoch import ManagedCursor
from .generations import Generations
from .log import Entry, EntryLog
from .permits import FlowPermits
from .position import successor
from .reads import Delivery, InFlightRead, ReadKind
from .routing import Router
from .seek import Message
from .state import DelayedTracker, RecentlyJoined, RedeliverySet


@dataclass(frozen=True, slots=True)
class ReadSettings:
    """How the dispatcher reads: batch size, clock for delayed messages, batch-index acks, persist budget."""

    read_batch: int
    clock: Callable[[], float]
    batch_index_acks: bool
    budget: PersistBudget | None


@dataclass(frozen=True, slots=True)
class HeldPositions:
    """The positions not delivered yet: to replay, delayed, and held for recently joined consumers."""

    redelivery: RedeliverySet
    delayed: DelayedTracker
    recently_joined: RecentlyJoined


class InFlightReads:
    """Starts the dispatcher's reads and delivers the ones that complete, all under the dispatcher's lock."""

    def __init__(self, cursor: ManagedCursor, log: EntryLog, lock: threading.RLock, consumers: ConsumerSet,
                 permits: FlowPermits, router: Router, settings: ReadSettings, held: HeldPositions,
                 generations: Generations) -> None:
        self._cursor, self._log, self._lock = cursor, log, lock
        self._consumers, self._permits, self._router = consumers, permits, router
        self._settings, self._held, self._generations = settings, held, generations
        self._sequential: InFlightRead | None = None
        self._replay: InFlightRead | None = None

    @property
    def pending(self) -> list[InFlightRead]:
        return [r for r in (self._sequential, self._replay) if r is not None]

    @property
    def paused_for_ack_state(self) -> bool:
        """The cursor's state did not fit its persist budget at the last persist, and pausing is on."""
        budget = self._settings.budget
        return budget is not None and budget.pause_dispatch and self._cursor.metadata_size > budget.max_bytes

    def read_more(self) -> InFlightRead | None:
        """Start a sequential read from the read position (one at a time); None if nothing to read."""
        with self._lock:
            epoch = self._cursor.read_epoch()  # CursorModifyingError while a change runs
            if self._sequential is not None or not self._consumers.connected or self.paused_for_ack_state:
                return None
            permits = self._permits.available()
            if permits == 0:
                return None
            batch = self._settings.read_batch
            entries = self._log.read(self._cursor.read_position, min(batch, permits or batch))
            if not entries:
                return None
            self._sequential = self._new_read(ReadKind.SEQUENTIAL, epoch, entries)
            return self._sequential

    def replay(self) -> InFlightRead | None:
        """Start a replay read of redelivery positions (and delayed messages now due)."""
        with self._lock:
            epoch = self._cursor.read_epoch()
            if self._replay is not None or not self._consumers.connected or self.paused_for_ack_state:
                return None
            if self._permits.available() == 0:
                return None
            batch, redelivery = self._settings.read_batch, self._held.redelivery
            for position in self._held.delayed.pop_due(self._settings.clock(), batch):
                redelivery.add(position)
            positions = redelivery.first(batch)
            if not positions:
                return None
            self._replay = self._new_read(ReadKind.REPLAY, epoch, [self._log.entry(p) for p in positions])
            return self._replay

    def read_now(self) -> list[InFlightRead]:
        """Replay first, as Pulsar's ``readMoreEntries``, then read on from the read position."""
        return [r for r in (self.replay(), self.read_more()) if r is not None]

    def outdate(self) -> None:
        """A change began: the reads in flight are outdated and must not block new ones."""
        self._sequential = self._replay = None

    def release_recently_joined(self) -> None:
        """Free recently-joined consumers once everything before their max read position is acked."""
        mark_delete = self._cursor.mark_delete_position
        first_unacked = self._log.next_valid(successor(mark_delete)) or successor(mark_delete)
        self._held.recently_joined.release_up_to(first_unacked)

    def _new_read(self, kind: ReadKind, epoch: int, entries: list[Entry]) -> InFlightRead:
        return InFlightRead(kind, epoch, tuple(entries), self._consumers.epochs(), self._complete)

    def _complete(self, read: InFlightRead) -> list[Delivery]:
        with self._lock:
            if read is self._sequential:
                self._sequential = None
            if read is self._replay:
                self._replay = None
            if self._cursor.is_epoch_outdated(read.cursor_epoch):
                read.discarded = True  # PIP-269: an outdated read neither moves the cursor nor delivers
                return []
            if read.kind is ReadKind.SEQUENTIAL:
                if not self._cursor.set_read_position(successor(read.entries[-1].position), read.cursor_epoch):
                    # A change began after the check above (the cursor's lock, not ours, guards it):
                    # the read is just as outdated, and delivering it would hand out the old position.
                    read.discarded = True
                    return []
            else:
                for entry in read.entries:
                    self._held.redelivery.remove(entry.position)
            self.release_recently_joined()
            return [d for entry in read.entries if (d := self._dispatch(read, entry)) is not None]

    def _dispatch(self, read: InFlightRead, entry: Entry) -> Delivery | None:
        position, clock = entry.position, self._settings.clock
        if position <= self._cursor.mark_delete_position or self._cursor.acks.is_acked(position):
            return None
        if read.kind is ReadKind.SEQUENTIAL and entry.deliver_at is not None and entry.deliver_at > clock():
            self._held.delayed.add(position, entry.deliver_at)
            return None
        ack_set = self._ack_set(entry)
        target = self._router.route(entry.key, self._consumers.connected)
        joined = self._held.recently_joined.get(target.name) if target is not None else None
        if target is None or (joined is not None and position >= joined.max_read_position):
            # no consumer with permits for it, or Key_Shared holds it for a recently joined one
            self._held.redelivery.add(position)
            return None
        # The epoch the read began under, for this very connection; a connection that joined since
        # (a reconnect under the same name) gets the epoch it subscribed with, never the old one's.
        epoch = read.consumer_epochs.get(target, target.joined_epoch)
        target.send(Message(position, epoch, read.cursor_epoch, entry.key, entry.batch_size, ack_set))
        delivery = Delivery(self._generations.current, read.cursor_epoch, target.name, position, entry.key,
                            read.kind, delayed=entry.deliver_at is not None)
        self._generations.deliveries.append(delivery)
        return delivery

    def _ack_set(self, entry: Entry) -> frozenset[int]:
        if not self._settings.batch_index_acks or entry.batch_size == 1:
            return frozenset()
        return self._cursor.acks.acked_batch_indexes(entry.position, entry.batch_size)
