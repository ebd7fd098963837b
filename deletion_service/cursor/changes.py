"""Occasional read position changes: reset-cursor, seek, skip, clear-backlog, rewind.

Every one is the same two-phase task (PIP-269 "Goal-2"):

* :meth:`ChangesMixin.begin_change` — ``start_increase_epoch`` (new read
  position, cursor marked modifying), the new mark-delete, then the
  dispatcher's redelivery set, delayed tracker and recently-joined consumers
  are cleared and consumers optionally disconnected; consumers that connect
  meanwhile are deferred;
* :meth:`ChangesMixin.finish_change` — ``end_increase_epoch``, then the
  deferred consumers join against the new state.

Split in two so tests can put a read completion (or a consumer joining)
between the phases.  With ``epoch_checks`` off the mixin behaves as Pulsar did
before PIP-269: the dispatcher is cleared first and the cursor moved only when
the change finishes, with no guard in between — the behaviour the seeds'
scenarios break.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .position import Position, predecessor, successor
from .seek import SeekCommand

if TYPE_CHECKING:
    from .epoch import ManagedCursor
    from .log import EntryLog
    from .state import Consumer, DelayedTracker, RecentlyJoined, RedeliverySet


@dataclass(eq=False)
class Change:
    """A begun change; pass it to :meth:`ChangesMixin.finish_change` exactly once."""

    kind: str
    read_position: Position
    mark_delete: Position | None
    clear_acks: bool
    finished: bool = False


class ChangesMixin:
    """Occasional changes of a :class:`~.dispatcher.Dispatcher` (its attributes are declared there)."""

    cursor: ManagedCursor
    log: EntryLog
    consumers: dict[str, Consumer]
    redelivery: RedeliverySet
    delayed: DelayedTracker
    recently_joined: RecentlyJoined
    generation: int
    generation_start: dict[int, Position]
    _lock: threading.RLock
    _deferred: list[Consumer]
    _needs_rewind: bool

    def begin_change(self, kind: str, new_read_position: Callable[[], Position],
                     mark_delete: Callable[[Position], Position] | None = None, *,
                     clear_acks: bool = True, disconnect: bool = False) -> Change:
        """Phase one; raises :class:`CursorEpochConflictError` if a change already runs."""
        with self._lock:
            checks = self.cursor.epoch_checks
            if checks:
                self.cursor.start_increase_epoch(new_read_position)
                target = self.cursor.read_position
            else:
                target = Position(*new_read_position())
            new_mark_delete = mark_delete(target) if mark_delete is not None else None
            if checks and new_mark_delete is not None:
                self.cursor.set_mark_delete_in_change(new_mark_delete, clear_acks)
            if checks:
                self._pending_seq = self._pending_replay = None  # they are outdated; don't let them block reads
            self.generation += 1
            self.generation_start[self.generation] = target
            for name in list(self.consumers):
                if disconnect:
                    self.remove_consumer(name)
                else:
                    self.consumers[name].pending.clear()
            self.redelivery.clear()
            self.delayed.clear()
            self.recently_joined.clear()
            if checks:
                self._needs_rewind = False  # this change *is* the dispatcher reset
            return Change(kind, target, new_mark_delete, clear_acks)

    def finish_change(self, change: Change) -> int:
        """Phase two: bump the epoch (1) or report no running change (0); deferred consumers join."""
        with self._lock:
            if change.finished:
                raise RuntimeError(f"{change.kind}: finished twice")
            change.finished = True
            if not self.cursor.epoch_checks:  # pre-PIP: the cursor moves only now
                self.cursor.start_increase_epoch(lambda: change.read_position)
                if change.mark_delete is not None:
                    self.cursor.set_mark_delete_in_change(change.mark_delete, change.clear_acks)
            ended = self.cursor.end_increase_epoch()
            deferred, self._deferred = self._deferred, []
            for consumer in deferred:
                self._connect(consumer)
            self._after_change()
            return ended

    # ---- the occasional changes themselves

    def begin_reset(self, position: Position, disconnect: bool = True) -> Change:
        """reset-cursor: read = position, mark-delete = its predecessor, individual acks cleared."""
        return self.begin_change("reset", lambda: Position(*position), predecessor, disconnect=disconnect)

    def reset_cursor(self, position: Position, disconnect: bool = True) -> int:
        return self.finish_change(self.begin_reset(position, disconnect))

    def rewind(self) -> int:
        """Read from mark-delete + 1 again (dispatcher reset, compaction, replication)."""
        change = self.begin_change("rewind", lambda: successor(self.cursor.mark_delete_position))
        return self.finish_change(change)

    def skip(self, n: int) -> int:
        """Acknowledge the next ``n`` unacked entries (``pulsar-admin topics skip``)."""
        with self._lock:
            mark_delete, left = self.cursor.mark_delete_position, n
            while left > 0 and (nxt := self.log.next_valid(successor(mark_delete))) is not None:
                mark_delete, left = nxt, left - (0 if self.cursor.acks.is_acked(nxt) else 1)
            new_read = max(self.cursor.read_position, successor(mark_delete))
            change = self.begin_change("skip", lambda: new_read, lambda _: mark_delete, clear_acks=False)
            return self.finish_change(change)

    def clear_backlog(self) -> int:
        """Acknowledge everything written so far (``pulsar-admin topics clear-backlog``)."""
        with self._lock:
            last = self.log.last_position or self.cursor.mark_delete_position
            change = self.begin_change("clear-backlog", lambda: successor(last), lambda _: last)
            return self.finish_change(change)

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
                self.reset_cursor(command.position, disconnect=False)
            except BaseException:
                c.epoch.reset(previous)
                raise
            return True

    def _connect(self, consumer: Consumer) -> None:  # implemented by the dispatcher
        raise NotImplementedError

    def _after_change(self) -> None:  # implemented by the dispatcher: reads that flow asked for meanwhile
        raise NotImplementedError

    def remove_consumer(self, name: str) -> None:  # implemented by the dispatcher
        raise NotImplementedError
