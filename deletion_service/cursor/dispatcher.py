"""A small in-memory multi-consumer dispatcher (Shared / Key_Shared) over a :class:`ManagedCursor`.

It models what PIP-269 is about: reads that are *in flight* while an
occasional read position change runs.  Reads are started explicitly and
completed by calling :meth:`InFlightRead.complete`, so tests can inject a
completion at every point of a change.  Occasional changes are carried out
by :class:`~.changes.ReadPositionChanges`, which reaches this dispatcher only
through :class:`~.changes.ResetsWithCursor` (:meth:`Dispatcher.start_generation`,
:meth:`Dispatcher.change_finished`); the dispatcher's change methods hand over
to it.  Which consumer an entry goes to is :mod:`.routing`'s; this module is
reads, flow permits, acks and consumers.

Flow permits: a consumer added with ``permits`` gets only that many messages
until it sends :meth:`Dispatcher.flow`; one added without is outside flow
control (the model's default).  A flow that arrives while a change runs does
not read (stage 1 of the seek-epoch proposal: check the cursor's state on
flow permits); the read starts when the change ends, from the new position.

Batch-index acks (PIP-54, ``batch_index_acks``): dispatch carries a batch's
acked indexes as ``ack_set``, the client skips them, and they cost no permits.

The ack-state budget: with ``budget.pause_dispatch``, no read starts while the
cursor's state, as last persisted, was over the budget.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .ack_budget import PersistBudget
from .changes import Change, ReadPositionChanges
from .epoch import ManagedCursor
from .log import Entry, EntryLog
from .position import Position, successor
from .reads import Delivery, InFlightRead, ReadKind
from .routing import Router, Selector, crc_selector
from .seek import ClientConsumer, Message, SeekCommand
from .state import Consumer, DelayedTracker, RecentlyJoined, RedeliverySet


class Dispatcher:
    """Redelivery set, delayed tracker, recently-joined consumers and consumers, under one lock.

    ``changes`` moves the cursor and this dispatcher together, under the same lock.
    """

    def __init__(self, cursor: ManagedCursor, log: EntryLog, *, key_shared: bool = False, read_batch: int = 5,
                 selector: Selector = crc_selector, clock: Callable[[], float] = lambda: 0.0,
                 batch_index_acks: bool = False, budget: PersistBudget | None = None) -> None:
        self.cursor, self.log, self.read_batch = cursor, log, read_batch
        self.router, self.clock = Router(key_shared, selector), clock
        self.batch_index_acks, self.budget = batch_index_acks, budget
        self.redelivery = RedeliverySet()
        self.delayed = DelayedTracker()
        self.recently_joined = RecentlyJoined()
        self.consumers: dict[str, Consumer] = {}
        self.deliveries: list[Delivery] = []
        self.generation = 0
        self.generation_start: dict[int, Position] = {0: cursor.read_position}
        self._lock = threading.RLock()
        self._pending_seq: InFlightRead | None = None
        self._pending_replay: InFlightRead | None = None
        self._deferred: list[Consumer] = []
        self._needs_rewind = False
        self._read_after_change = False
        self.changes = ReadPositionChanges(cursor, log, self._lock, self)

    @classmethod
    def from_config(cls, cursor: ManagedCursor, log: EntryLog, config: object, **kwargs: object) -> Dispatcher:
        """A dispatcher as the service config sets it up: ``acknowledgmentAtBatchIndexLevelEnabled``,
        the persist budget and ``dispatcherPauseOnAckPersistentStateEnabled``."""
        return cls(cursor, log, batch_index_acks=config.acknowledgment_at_batch_index_level_enabled,  # type: ignore[attr-defined]
                   budget=PersistBudget.from_config(config), **kwargs)  # type: ignore[arg-type]

    @property
    def key_shared(self) -> bool:
        return self.router.key_shared

    @property
    def epoch_checks(self) -> bool:
        return self.cursor.epoch_checks

    @property
    def pending_reads(self) -> list[InFlightRead]:
        return [r for r in (self._pending_seq, self._pending_replay) if r is not None]

    @property
    def paused_for_ack_state(self) -> bool:
        """The cursor's state did not fit its persist budget at the last persist, and pausing is on."""
        budget = self.budget
        return budget is not None and budget.pause_dispatch and self.cursor.metadata_size > budget.max_bytes

    def _available_permits(self) -> int | None:
        """Messages the consumers may still take; None when one is outside flow control."""
        total = 0
        for consumer in self.consumers.values():
            if consumer.permits is None:
                return None
            total += max(consumer.permits, 0)
        return total

    # ---- reads

    def read_more(self) -> InFlightRead | None:
        """Start a sequential read from the read position (one at a time); None if nothing to read."""
        with self._lock:
            epoch = self.cursor.read_epoch()  # CursorModifyingError while a change runs
            if self._pending_seq is not None or not self.consumers or self.paused_for_ack_state:
                return None
            permits = self._available_permits()
            if permits == 0:
                return None
            entries = self.log.read(self.cursor.read_position, min(self.read_batch, permits or self.read_batch))
            if not entries:
                return None
            self._pending_seq = self._new_read(ReadKind.SEQUENTIAL, epoch, entries)
            return self._pending_seq

    def replay(self) -> InFlightRead | None:
        """Start a replay read of redelivery positions (and delayed messages now due)."""
        with self._lock:
            epoch = self.cursor.read_epoch()
            if self._pending_replay is not None or not self.consumers or self.paused_for_ack_state:
                return None
            if self._available_permits() == 0:
                return None
            for position in self.delayed.pop_due(self.clock(), self.read_batch):
                self.redelivery.add(position)
            positions = self.redelivery.first(self.read_batch)
            if not positions:
                return None
            self._pending_replay = self._new_read(ReadKind.REPLAY, epoch, [self.log.entry(p) for p in positions])
            return self._pending_replay

    def _new_read(self, kind: ReadKind, epoch: int, entries: list[Entry]) -> InFlightRead:
        epochs = {c: c.epoch.value for c in self.consumers.values()}
        return InFlightRead(kind, epoch, tuple(entries), epochs, self._complete)

    def _complete(self, read: InFlightRead) -> list[Delivery]:
        with self._lock:
            if read is self._pending_seq:
                self._pending_seq = None
            if read is self._pending_replay:
                self._pending_replay = None
            if self.cursor.is_epoch_outdated(read.cursor_epoch):
                read.discarded = True  # PIP-269: an outdated read neither moves the cursor nor delivers
                return []
            if read.kind is ReadKind.SEQUENTIAL:
                if not self.cursor.set_read_position(successor(read.entries[-1].position), read.cursor_epoch):
                    # A change began after the check above (the cursor's lock, not ours, guards it):
                    # the read is just as outdated, and delivering it would hand out the old position.
                    read.discarded = True
                    return []
            else:
                for entry in read.entries:
                    self.redelivery.remove(entry.position)
            self._release_recently_joined()
            return [d for entry in read.entries if (d := self._dispatch(read, entry)) is not None]

    def _dispatch(self, read: InFlightRead, entry: Entry) -> Delivery | None:
        position = entry.position
        if position <= self.cursor.mark_delete_position or self.cursor.acks.is_acked(position):
            return None
        if read.kind is ReadKind.SEQUENTIAL and entry.deliver_at is not None and entry.deliver_at > self.clock():
            self.delayed.add(position, entry.deliver_at)
            return None
        ack_set = self._ack_set(entry)
        target = self.router.route(entry.key, self.consumers)
        joined = self.recently_joined.get(target.name) if target is not None else None
        if target is None or (joined is not None and position >= joined.max_read_position):
            # no consumer with permits for it, or Key_Shared holds it for a recently joined one
            self.redelivery.add(position)
            return None
        # The epoch the read began under, for this very connection; a connection that joined since
        # (a reconnect under the same name) gets the epoch it subscribed with, never the old one's.
        epoch = read.consumer_epochs.get(target, target.joined_epoch)
        target.send(Message(position, epoch, read.cursor_epoch, entry.key, entry.batch_size, ack_set))
        delivery = Delivery(self.generation, read.cursor_epoch, target.name, position, entry.key, read.kind,
                            delayed=entry.deliver_at is not None)
        self.deliveries.append(delivery)
        return delivery

    def _ack_set(self, entry: Entry) -> frozenset[int]:
        if not self.batch_index_acks or entry.batch_size == 1:
            return frozenset()
        return self.cursor.acks.acked_batch_indexes(entry.position, entry.batch_size)

    # ---- flow permits

    def flow(self, consumer: str, permits: int) -> list[InFlightRead]:
        """The consumer may take ``permits`` more messages; returns the reads this starts.

        While a change runs, no read starts (one would be outdated, or, before PIP-269, read
        from the old position): the permits are kept and the read starts when the change ends.
        """
        if permits < 0:
            raise ValueError(f"flow permits must be >= 0, got {permits}")
        with self._lock:
            # a consumer that joined during a change waits in _deferred: its permits count all the same
            c = self.consumers.get(consumer) or next((d for d in self._deferred if d.name == consumer), None)
            if c is None:
                return []
            c.permits = (c.permits or 0) + permits
            if self.cursor.modifying:
                self._read_after_change = True
                return []
            return self._read_now()

    def _read_now(self) -> list[InFlightRead]:
        """Replay first, as Pulsar's ``readMoreEntries``, then read on from the read position."""
        return [r for r in (self.replay(), self.read_more()) if r is not None]

    # ---- acks

    def ack(self, consumer: str, position: Position) -> bool:
        """The consumer acknowledged ``position``: advance mark-delete, release recently-joined consumers."""
        with self._lock:
            c = self.consumers.get(consumer)
            if c is None or position not in c.pending:
                return False
            c.pending.discard(position)
            self.cursor.ack(position, self.log.next_valid)
            self._release_recently_joined()
            return True

    def _release_recently_joined(self) -> None:
        """Free recently-joined consumers once everything before their max read position is acked."""
        mark_delete = self.cursor.mark_delete_position
        self.recently_joined.release_up_to(self.log.next_valid(successor(mark_delete)) or successor(mark_delete))

    def ack_batch_index(self, consumer: str, position: Position, indexes: list[int]) -> bool:
        """The consumer acknowledged some messages of a batch (PIP-54); True once the entry is acked.

        Without ``batch_index_acks`` the broker ignores index acks, as Pulsar does: the entry
        stays unacked until the client acks it whole.
        """
        with self._lock:
            c = self.consumers.get(consumer)
            if c is None or position not in c.pending or not self.batch_index_acks:
                return False
            batch_size = self.log.entry(position).batch_size
            if not self.cursor.ack_batch_index(position, batch_size, indexes, self.log.next_valid):
                return False
            c.pending.discard(position)
            self._release_recently_joined()
            return True

    def nack(self, consumer: str, position: Position) -> bool:
        """Negative ack: the position goes to the redelivery set for a replay read."""
        with self._lock:
            c = self.consumers.get(consumer)
            if c is None or position not in c.pending:
                return False
            c.pending.discard(position)
            self.redelivery.add(position)
            return True

    # ---- consumers

    def add_consumer(self, client: ClientConsumer, permits: int | None = None) -> Consumer:
        """Connect a consumer (with ``permits``: under flow control); during a running change it
        joins when the change ends (atomicity)."""
        with self._lock:
            consumer = Consumer(client, permits=permits)
            consumer.joined_epoch = client.reconnected()
            consumer.epoch.reset(consumer.joined_epoch)
            if self.epoch_checks and self.cursor.modifying:
                self._deferred.append(consumer)
            else:
                self._connect(consumer)
            return consumer

    def _connect(self, consumer: Consumer) -> None:
        if not self.consumers and self._needs_rewind:
            self.changes.rewind()  # "dispatcher reset": the first consumer after none starts from mark-delete + 1
        self._needs_rewind = False
        if self.key_shared and self.consumers:
            # entries below the read position may sit unacked at other consumers: hold its keys back until acked
            self.recently_joined.add(consumer.name, self.cursor.read_position, self.cursor.epoch)
        self.consumers[consumer.name] = consumer

    def remove_consumer(self, name: str) -> None:
        """Disconnect: its unacked messages go to the redelivery set."""
        with self._lock:
            self._deferred = [c for c in self._deferred if c.name != name]
            consumer = self.consumers.pop(name, None)
            if consumer is None:
                return
            for position in consumer.pending:
                self.redelivery.add(position)
            consumer.pending.clear()
            self.recently_joined.remove(name)
            if not self.consumers:
                self._needs_rewind = True

    def handle_seek(self, consumer: str, command: SeekCommand) -> bool:
        """A consumer's seek: adopt its epoch if bigger, then reset the cursor; False for an unknown consumer.

        The seed says only that the server's epoch never goes down, so a seek whose epoch is not
        bigger (an older client sends none, i.e. 0) still seeks; its epoch is just not adopted.
        The epoch and the reset go together: when the reset fails (another change runs:
        :class:`CursorEpochConflictError`), the consumer's epoch goes back to what it was, or
        messages from the old position would carry the new epoch past the client's filter."""
        with self._lock:
            c = self.consumers.get(consumer)
            if c is None:
                return False
            previous = c.epoch.value
            c.epoch.advance(command.consumer_epoch)  # never down: a smaller or equal one keeps ours
            try:
                self.changes.reset_cursor(command.position, disconnect=False)
            except BaseException:
                c.epoch.reset(previous)
                raise
            return True

    # ---- what a change does here (ResetsWithCursor; called by ``changes`` under the lock)

    def start_generation(self, read_position: Position, *, disconnect: bool, epoch_checks: bool) -> None:
        """A change began: reads in flight are outdated (they must not block new ones), and the
        consumers' unacked messages, the redelivery set, the delayed tracker and the recently-joined
        consumers all belong to the old read position."""
        if epoch_checks:
            self._pending_seq = self._pending_replay = None
        self.generation += 1
        self.generation_start[self.generation] = read_position
        for name in list(self.consumers):
            if disconnect:
                self.remove_consumer(name)
            else:
                self.consumers[name].pending.clear()
        self.redelivery.clear()
        self.delayed.clear()
        self.recently_joined.clear()
        if epoch_checks:
            self._needs_rewind = False  # this change *is* the dispatcher reset

    def change_finished(self) -> None:
        """The epoch ended: consumers that connected meanwhile join, and reads flow asked for start."""
        deferred, self._deferred = self._deferred, []
        for consumer in deferred:
            self._connect(consumer)
        if self._read_after_change:
            self._read_after_change = False
            self._read_now()

    # ---- occasional changes: carried out by ``changes`` (see :mod:`.changes`)

    def begin_reset(self, position: Position, disconnect: bool = True) -> Change:
        return self.changes.begin_reset(position, disconnect)

    def finish_change(self, change: Change) -> int:
        return self.changes.finish_change(change)

    def reset_cursor(self, position: Position, disconnect: bool = True) -> int:
        return self.changes.reset_cursor(position, disconnect)

    def rewind(self) -> int:
        return self.changes.rewind()

    def skip(self, n: int) -> int:
        return self.changes.skip(n)

    def clear_backlog(self) -> int:
        return self.changes.clear_backlog()
