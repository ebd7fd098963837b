"""Consumers joining and leaving the dispatcher, and what a read position change resets with the cursor.

This is the dispatcher side of :class:`~.changes.ReadPositionChanges`
(:class:`~.changes.ResetsWithCursor`): when a change begins, the reads in
flight are outdated and the consumers' unacked messages, the redelivery set,
the delayed tracker and the recently-joined consumers all belong to the old
read position, so they go; when it ends, the consumers that connected
meanwhile join and the reads flow permits asked for start.  Every method runs
under the dispatcher's lock, so a change is atomic for every consumer joining.
"""

from __future__ import annotations

import threading

from .changes import ReadPositionChanges
from .consumers import ConsumerSet
from .epoch import ManagedCursor
from .generations import Generations
from .in_flight import HeldPositions, InFlightReads
from .log import EntryLog
from .permits import FlowPermits
from .position import Position
from .seek import ClientConsumer
from .state import Consumer


class Membership:
    """Connects and disconnects consumers; carries out a change's reset of the dispatcher (ResetsWithCursor)."""

    def __init__(self, cursor: ManagedCursor, log: EntryLog, lock: threading.RLock, consumers: ConsumerSet,
                 *, key_shared: bool, reads: InFlightReads, permits: FlowPermits, held: HeldPositions,
                 generations: Generations) -> None:
        self._cursor, self._lock, self._consumers, self._key_shared = cursor, lock, consumers, key_shared
        self._reads, self._permits, self._held, self._generations = reads, permits, held, generations
        self.changes = ReadPositionChanges(cursor, log, lock, self)

    def add(self, client: ClientConsumer, permits: int | None = None) -> Consumer:
        """Connect a consumer (with ``permits``: under flow control); during a running change it
        joins when the change ends (atomicity)."""
        with self._lock:
            consumer = Consumer(client, permits=permits)
            consumer.joined_epoch = client.reconnected()
            consumer.epoch.reset(consumer.joined_epoch)
            if self._cursor.epoch_checks and self._cursor.modifying:
                self._consumers.wait(consumer)
            else:
                self._connect(consumer)
            return consumer

    def _connect(self, consumer: Consumer) -> None:
        if self._consumers.rewind_due:
            self.changes.rewind()  # "dispatcher reset": the first consumer after none starts from mark-delete + 1
        if self._key_shared and self._consumers.connected:
            # entries below the read position may sit unacked at other consumers: hold its keys back until acked
            self._held.recently_joined.add(consumer.name, self._cursor.read_position, self._cursor.epoch)
        self._consumers.connect(consumer)

    def remove(self, name: str) -> None:
        """Disconnect: its unacked messages go to the redelivery set."""
        with self._lock:
            consumer = self._consumers.disconnect(name)
            if consumer is None:
                return
            for position in consumer.pending:
                self._held.redelivery.add(position)
            consumer.pending.clear()
            self._held.recently_joined.remove(name)

    def start_generation(self, read_position: Position, *, disconnect: bool, epoch_checks: bool) -> None:
        """A change began: reads in flight are outdated (they must not block new ones), and the
        consumers' unacked messages, the redelivery set, the delayed tracker and the recently-joined
        consumers all belong to the old read position."""
        if epoch_checks:
            self._reads.outdate()
        self._generations.begin(read_position)
        for name in list(self._consumers.connected):
            if disconnect:
                self.remove(name)
            else:
                self._consumers.connected[name].pending.clear()
        self._held.redelivery.clear()
        self._held.delayed.clear()
        self._held.recently_joined.clear()
        if epoch_checks:
            self._consumers.cancel_rewind()  # this change *is* the dispatcher reset

    def change_finished(self) -> None:
        """The epoch ended: consumers that connected meanwhile join, and reads flow asked for start."""
        for consumer in self._consumers.take_waiting():
            self._connect(consumer)
        if self._permits.take_held_read():
            self._reads.read_now()
