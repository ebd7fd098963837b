"""A small in-memory multi-consumer dispatcher (Shared / Key_Shared) over a :class:`ManagedCursor`.

It models what PIP-269 is about: reads that are *in flight* while an
occasional read position change runs.  Reads are started explicitly and
completed by calling :meth:`InFlightRead.complete`, so tests can inject a
completion at every point of a change.  :class:`Dispatcher` is what a broker
and its consumers talk to; the work is its collaborators', one concept each:

* :mod:`.in_flight` — the reads in flight and what completing one delivers
  (batch-index acks, the ack-state budget's pause);
* :mod:`.permits` — flow permits, and the read a flow during a change holds;
* :mod:`.consumers`, :mod:`.membership` — consumers joining and leaving, and
  the dispatcher state a change resets with the cursor;
* :mod:`.changes` — the occasional changes themselves (reset, rewind, skip,
  clear-backlog); :mod:`.routing` — which consumer an entry goes to;
* :mod:`.generations` — every delivery, by the generation it was made in.

All of them share one lock: a change is atomic for every read, ack and consumer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .ack_budget import PersistBudget
from .changes import Change
from .consumers import ConsumerSet
from .epoch import ManagedCursor
from .generations import Generations
from .in_flight import HeldPositions, InFlightReads, ReadSettings
from .log import EntryLog
from .membership import Membership
from .permits import FlowPermits
from .position import Position
from .reads import InFlightRead
from .routing import Router, Selector, crc_selector
from .seek import ClientConsumer, SeekCommand
from .state import Consumer, DelayedTracker, RecentlyJoined, RedeliverySet


class Dispatcher:
    """A subscription's dispatcher: reads, flow permits, acks, seeks and consumers, under one lock.

    ``changes`` moves the cursor and this dispatcher together, under the same lock.
    """

    def __init__(self, cursor: ManagedCursor, log: EntryLog, *, key_shared: bool = False, read_batch: int = 5,
                 selector: Selector = crc_selector, clock: Callable[[], float] = lambda: 0.0,
                 batch_index_acks: bool = False, budget: PersistBudget | None = None) -> None:
        self.cursor, self.log, self.read_batch = cursor, log, read_batch
        self.router, self.clock = Router(key_shared, selector), clock
        self.batch_index_acks, self.budget = batch_index_acks, budget
        held = HeldPositions(RedeliverySet(), DelayedTracker(), RecentlyJoined())
        self.redelivery, self.delayed, self.recently_joined = held.redelivery, held.delayed, held.recently_joined
        self._generations = Generations(cursor.read_position)
        self.deliveries, self.generation_start = self._generations.deliveries, self._generations.start
        self._lock = threading.RLock()
        self._consumers = ConsumerSet()
        self.consumers: dict[str, Consumer] = self._consumers.connected
        self.flow_permits = FlowPermits(self._consumers)
        self.reads = InFlightReads(cursor, log, self._lock, self._consumers, self.flow_permits, self.router,
                                   ReadSettings(read_batch, clock, batch_index_acks, budget), held,
                                   self._generations)
        self.membership = Membership(cursor, log, self._lock, self._consumers, key_shared=key_shared,
                                     reads=self.reads, permits=self.flow_permits, held=held,
                                     generations=self._generations)
        self.changes = self.membership.changes

    @classmethod
    def from_config(cls, cursor: ManagedCursor, log: EntryLog, config: object, **kwargs: object) -> Dispatcher:
        """A dispatcher as the service config sets it up: ``acknowledgmentAtBatchIndexLevelEnabled``,
        the persist budget and ``dispatcherPauseOnAckPersistentStateEnabled``."""
        return cls(cursor, log, batch_index_acks=config.acknowledgment_at_batch_index_level_enabled,  # type: ignore[attr-defined]
                   budget=PersistBudget.from_config(config), **kwargs)  # type: ignore[arg-type]

    @property
    def generation(self) -> int:
        """Read position changes begun so far; every delivery carries the one it was made in."""
        return self._generations.current

    @property
    def pending_reads(self) -> list[InFlightRead]:
        return self.reads.pending

    @property
    def paused_for_ack_state(self) -> bool:
        """The cursor's state did not fit its persist budget at the last persist, and pausing is on."""
        return self.reads.paused_for_ack_state

    # ---- reads

    def read_more(self) -> InFlightRead | None:
        """Start a sequential read from the read position (one at a time); None if nothing to read."""
        return self.reads.read_more()

    def replay(self) -> InFlightRead | None:
        """Start a replay read of redelivery positions (and delayed messages now due)."""
        return self.reads.replay()

    def flow(self, consumer: str, permits: int) -> list[InFlightRead]:
        """The consumer may take ``permits`` more messages; returns the reads this starts.

        While a change runs, no read starts (one would be outdated, or, before PIP-269, read
        from the old position): the permits are kept and the read starts when the change ends.
        """
        with self._lock:
            if not self.flow_permits.grant(consumer, permits):
                return []
            if self.cursor.modifying:
                self.flow_permits.hold_read()
                return []
            return self.reads.read_now()

    # ---- acks

    def ack(self, consumer: str, position: Position) -> bool:
        """The consumer acknowledged ``position``: advance mark-delete, release recently-joined consumers."""
        with self._lock:
            c = self._consumers.get(consumer)
            if c is None or position not in c.pending:
                return False
            c.pending.discard(position)
            self.cursor.ack(position, self.log.next_valid)
            self.reads.release_recently_joined()
            return True

    def ack_batch_index(self, consumer: str, position: Position, indexes: list[int]) -> bool:
        """The consumer acknowledged some messages of a batch (PIP-54); True once the entry is acked.

        Without ``batch_index_acks`` the broker ignores index acks, as Pulsar does: the entry
        stays unacked until the client acks it whole.
        """
        with self._lock:
            c = self._consumers.get(consumer)
            if c is None or position not in c.pending or not self.batch_index_acks:
                return False
            batch_size = self.log.entry(position).batch_size
            if not self.cursor.ack_batch_index(position, batch_size, indexes, self.log.next_valid):
                return False
            c.pending.discard(position)
            self.reads.release_recently_joined()
            return True

    def nack(self, consumer: str, position: Position) -> bool:
        """Negative ack: the position goes to the redelivery set for a replay read."""
        with self._lock:
            c = self._consumers.get(consumer)
            if c is None or position not in c.pending:
                return False
            c.pending.discard(position)
            self.redelivery.add(position)
            return True

    # ---- consumers

    def add_consumer(self, client: ClientConsumer, permits: int | None = None) -> Consumer:
        """Connect a consumer (with ``permits``: under flow control); during a running change it
        joins when the change ends (atomicity)."""
        return self.membership.add(client, permits)

    def remove_consumer(self, name: str) -> None:
        """Disconnect: its unacked messages go to the redelivery set."""
        self.membership.remove(name)

    def handle_seek(self, consumer: str, command: SeekCommand) -> bool:
        """A consumer's seek: adopt its epoch if bigger, then reset the cursor; False for an unknown consumer.

        The only rule is that the server's epoch never goes down, so a seek whose epoch is not
        bigger (an older client sends none, i.e. 0) still seeks; its epoch is just not adopted.
        The epoch and the reset go together: when the reset fails (another change runs:
        :class:`CursorEpochConflictError`), the consumer's epoch goes back to what it was, or
        messages from the old position would carry the new epoch past the client's filter."""
        with self._lock:
            c = self._consumers.get(consumer)
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
