"""Occasional read position changes: reset-cursor, skip, clear-backlog, rewind (and, through them, seek).

Every one is the same two-phase task (PIP-269 "Goal-2"), carried out by
:class:`ReadPositionChanges` on the cursor and on the dispatcher it moves with:

* :meth:`ReadPositionChanges.begin_change` — ``start_increase_epoch`` (new read
  position, cursor marked modifying), the new mark-delete, then the
  dispatcher starts a new generation (:meth:`ResetsWithCursor.start_generation`:
  its redelivery set, delayed tracker and recently-joined consumers cleared,
  consumers optionally disconnected); consumers that connect meanwhile are
  deferred by the dispatcher;
* :meth:`ReadPositionChanges.finish_change` — ``end_increase_epoch``, then
  the dispatcher lets the deferred consumers join against the new state
  (:meth:`ResetsWithCursor.change_finished`).

Both phases run under the dispatcher's lock, handed in at construction: the
order above is atomic for every read, ack and consumer that takes that lock.
Split in two so tests can put a read completion (or a consumer joining)
between the phases.  With ``epoch_checks`` off a change behaves as Pulsar did
before PIP-269: the dispatcher is cleared first and the cursor moved only when
the change finishes, with no guard in between — the behaviour the seeds'
scenarios break.

This module knows the dispatcher only through :class:`ResetsWithCursor`; the
dispatcher knows this one only through its public methods.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from .epoch import ManagedCursor
from .log import EntryLog
from .position import Position, predecessor, successor


class ChangeKind(StrEnum):
    """Which occasional change; named in errors."""

    RESET = "reset"
    REWIND = "rewind"
    SKIP = "skip"
    CLEAR_BACKLOG = "clear-backlog"


@dataclass(eq=False)
class Change:
    """A begun change; pass it to :meth:`ReadPositionChanges.finish_change` exactly once."""

    kind: ChangeKind
    read_position: Position
    mark_delete: Position | None
    clear_acks: bool
    finished: bool = False


class ResetsWithCursor(Protocol):
    """What a change needs from the dispatcher: the state tied to the old read position, reset with the cursor.

    Both are called with the shared lock held, in the order the module docstring gives.
    """

    def start_generation(self, read_position: Position, *, disconnect: bool, epoch_checks: bool) -> None:
        """A change began: forget what belongs to the old read position; reads in flight are outdated
        when ``epoch_checks`` is on.  ``disconnect``: every consumer is disconnected, not just cleared."""
        ...

    def change_finished(self) -> None:
        """The epoch ended: consumers deferred meanwhile join, reads asked for meanwhile start."""
        ...


class ReadPositionChanges:
    """The two-phase occasional changes of one cursor and the dispatcher that moves with it."""

    def __init__(self, cursor: ManagedCursor, log: EntryLog, lock: threading.RLock,
                 dispatcher: ResetsWithCursor) -> None:
        self._cursor, self._log, self._lock, self._dispatcher = cursor, log, lock, dispatcher

    def begin_change(self, kind: ChangeKind, new_read_position: Callable[[], Position],
                     mark_delete: Callable[[Position], Position] | None = None, *,
                     clear_acks: bool = True, disconnect: bool = False) -> Change:
        """Phase one; raises :class:`CursorEpochConflictError` if a change already runs."""
        with self._lock:
            checks = self._cursor.epoch_checks
            if checks:
                self._cursor.start_increase_epoch(new_read_position)
                target = self._cursor.read_position
            else:
                target = Position(*new_read_position())
            new_mark_delete = mark_delete(target) if mark_delete is not None else None
            if checks and new_mark_delete is not None:
                self._cursor.set_mark_delete_in_change(new_mark_delete, clear_acks)
            self._dispatcher.start_generation(target, disconnect=disconnect, epoch_checks=checks)
            return Change(kind, target, new_mark_delete, clear_acks)

    def finish_change(self, change: Change) -> int:
        """Phase two: bump the epoch (1) or report no running change (0); deferred consumers join."""
        with self._lock:
            if change.finished:
                raise RuntimeError(f"{change.kind}: finished twice")
            change.finished = True
            if not self._cursor.epoch_checks:  # pre-PIP: the cursor moves only now
                self._cursor.start_increase_epoch(lambda: change.read_position)
                if change.mark_delete is not None:
                    self._cursor.set_mark_delete_in_change(change.mark_delete, change.clear_acks)
            ended = self._cursor.end_increase_epoch()
            self._dispatcher.change_finished()
            return ended

    # ---- the occasional changes themselves

    def begin_reset(self, position: Position, disconnect: bool = True) -> Change:
        """reset-cursor: read = position, mark-delete = its predecessor, individual acks cleared."""
        return self.begin_change(ChangeKind.RESET, lambda: Position(*position), predecessor, disconnect=disconnect)

    def reset_cursor(self, position: Position, disconnect: bool = True) -> int:
        return self.finish_change(self.begin_reset(position, disconnect))

    def rewind(self) -> int:
        """Read from mark-delete + 1 again (dispatcher reset, compaction, replication)."""
        change = self.begin_change(ChangeKind.REWIND, lambda: successor(self._cursor.mark_delete_position))
        return self.finish_change(change)

    def skip(self, n: int) -> int:
        """Acknowledge the next ``n`` unacked entries (``pulsar-admin topics skip``)."""
        with self._lock:
            mark_delete, left = self._cursor.mark_delete_position, n
            while left > 0 and (nxt := self._log.next_valid(successor(mark_delete))) is not None:
                mark_delete, left = nxt, left - (0 if self._cursor.acks.is_acked(nxt) else 1)
            new_read = max(self._cursor.read_position, successor(mark_delete))
            change = self.begin_change(ChangeKind.SKIP, lambda: new_read, lambda _: mark_delete, clear_acks=False)
            return self.finish_change(change)

    def clear_backlog(self) -> int:
        """Acknowledge everything written so far (``pulsar-admin topics clear-backlog``)."""
        with self._lock:
            last = self._log.last_position or self._cursor.mark_delete_position
            change = self.begin_change(ChangeKind.CLEAR_BACKLOG, lambda: successor(last), lambda _: last)
            return self.finish_change(change)
