"""The cursor epoch (PIP-269): one counter that makes occasional read position changes safe.

Rule of this module: the cursor's positions and its epoch change under one lock,
and an *occasional* read position change (reset-cursor, seek, skip,
clear-backlog, rewind) is always a two-phase task:

1. :meth:`ManagedCursor.start_increase_epoch` sets the new read position and
   marks the cursor *modifying*; from then on every in-flight sequential or
   replay read is outdated and new reads fail with :class:`CursorModifyingError`;
2. the caller changes whatever else must change atomically with the cursor
   (mark-delete, acks, the dispatcher's redelivery set, delayed tracker,
   Key_Shared recently-joined consumers);
3. :meth:`ManagedCursor.end_increase_epoch` bumps the epoch and clears the mark.

Reads carry the epoch they started in; their completion moves the read
position only through :meth:`set_read_position` with that epoch, and delivers
only if :meth:`is_epoch_outdated` is False.  That replaces Pulsar's "rewind
after in-flight read" workaround entirely (there is none here).

``epoch_checks=False`` switches the checks off (no outdated reads, no
conflicts) to reproduce pre-PIP behaviour in tests; production never does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from .acks import AckState
from .exceptions import CursorEpochConflictError, CursorModifyingError
from .position import Position, successor


class EpochObserver(Protocol):
    """Told when an epoch increase task starts and ends (metrics hook; must not block)."""

    def on_start(self) -> None: ...

    def on_end(self, increased: bool) -> None: ...


class ManagedCursor:
    """A cursor's in-memory state: positions, ack ranges, epoch.  Thread-safe; no I/O."""

    def __init__(
        self,
        name: str,
        mark_delete_position: Position,
        read_position: Position | None = None,
        *,
        acks: AckState | None = None,
        epoch_checks: bool = True,
        observer: EpochObserver | None = None,
    ) -> None:
        self.name = name
        self.epoch_checks = epoch_checks
        self.acks = acks if acks is not None else AckState()
        self._observer = observer
        self._lock = threading.RLock()
        self._mark_delete = Position(*mark_delete_position)
        self._read = Position(*read_position) if read_position is not None else successor(self._mark_delete)
        self._epoch = 0
        self._modifying = False
        #: The whole cursor metadata's size at its last persist (``cursorMetadataSizeInMemoryBytes``):
        #: not real time, by design, since measuring it on every ack would cost more than the ack.
        self.metadata_size = 0

    # ---- state, read under the lock so a reader never sees half a change

    @property
    def epoch(self) -> int:
        """Current epoch, whether or not a change is running (PIP-269 ``getEpoch``)."""
        with self._lock:
            return self._epoch

    @property
    def read_position(self) -> Position:
        with self._lock:
            return self._read

    @property
    def mark_delete_position(self) -> Position:
        with self._lock:
            return self._mark_delete

    @property
    def modifying(self) -> bool:
        """True between start and end of an epoch increase (metric ``…_task_state``)."""
        with self._lock:
            return self._modifying

    # ---- the PIP-269 API

    def start_increase_epoch(self, new_read_position: Callable[[], Position]) -> int:
        """Mark the cursor modifying and set the new read position; returns the current epoch.

        ``new_read_position`` is evaluated under the lock so it sees a stable
        mark-delete position (rewind computes ``mark-delete + 1``).
        """
        with self._lock:
            if self._modifying and self.epoch_checks:
                raise CursorEpochConflictError(f"cursor {self.name}: a read position change is already running")
            self._read = Position(*new_read_position())
            self._modifying = True
            if self._observer is not None:
                self._observer.on_start()
            return self._epoch

    def end_increase_epoch(self) -> int:
        """Bump the epoch and clear the modifying mark; 1 if a change was running, else 0."""
        with self._lock:
            if not self._modifying:
                return 0
            self._modifying = False
            self._epoch += 1
            if self._observer is not None:
                self._observer.on_end(True)
            return 1

    def set_read_position(self, pos: Position, expected_epoch: int) -> bool:
        """Sequential-read completion: move the read position unless the epoch moved or a change runs."""
        with self._lock:
            if self.is_epoch_outdated(expected_epoch):
                return False
            self._read = Position(*pos)
            return True

    def is_epoch_outdated(self, epoch: int) -> bool:
        """True while modifying or once the epoch moved past ``epoch`` (never, with checks off)."""
        with self._lock:
            return self.epoch_checks and (self._modifying or epoch != self._epoch)

    # ---- helpers the dispatcher and persistence use

    def read_epoch(self) -> int:
        """The epoch a new read carries; :class:`CursorModifyingError` while a change runs."""
        with self._lock:
            if self._modifying and self.epoch_checks:
                raise CursorModifyingError(f"cursor {self.name}: a read position change is running")
            return self._epoch

    def set_mark_delete_in_change(self, position: Position, clear_acks: bool = True) -> None:
        """Move mark-delete (either way) as part of a running change, e.g. reset-cursor."""
        with self._lock:
            if not self._modifying:
                raise RuntimeError("set_mark_delete_in_change outside start/end_increase_epoch")
            self._mark_delete = Position(*position)
            if clear_acks:
                self.acks.clear()
            else:
                self.acks.trim_to(self._mark_delete)

    def ack(self, position: Position, next_valid: Callable[[Position], Position | None]) -> Position:
        """Individually acknowledge ``position``; advance mark-delete over acked entries; returns it.

        ``next_valid`` maps a position to the first existing entry at or after
        it (the managed ledger knows the ledger boundaries; the cursor does not).
        """
        with self._lock:
            if position > self._mark_delete:
                self.acks.ack(position)
            mark_delete = self._mark_delete
            while (nxt := next_valid(successor(mark_delete))) is not None and self.acks.is_acked(nxt):
                mark_delete = nxt
            self.mark_delete(mark_delete)
            return self._mark_delete

    def ack_batch_index(self, position: Position, batch_size: int, indexes: list[int],
                        next_valid: Callable[[Position], Position | None]) -> bool:
        """Acknowledge indexes of a batch (PIP-54); True once the whole entry is acked, which
        then advances mark-delete like a whole-entry ack."""
        with self._lock:
            if position <= self._mark_delete:
                return True
            if not self.acks.ack_batch_index(position, batch_size, indexes):
                return False
            self.ack(position, next_valid)
            return True

    def mark_delete(self, position: Position) -> bool:
        """Acknowledge everything up to ``position`` (the ack path: forward only, no epoch change)."""
        with self._lock:
            if position <= self._mark_delete:
                return False
            self._mark_delete = Position(*position)
            self.acks.trim_to(self._mark_delete)
            if self._read <= self._mark_delete:
                self._read = successor(self._mark_delete)
            return True

    def __repr__(self) -> str:
        return (f"ManagedCursor({self.name!r}, mark_delete={self._mark_delete}, read={self._read}, "
                f"epoch={self._epoch}, modifying={self._modifying})")
