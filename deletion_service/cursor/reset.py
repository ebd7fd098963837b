"""reset-cursor on a stored cursor: validate, change through the core, save — safely next to ``trim``.

What a reset sets (as Pulsar's ``ManagedCursorImpl.internalResetCursor``): the
read position to the given position, the mark-delete position to its
predecessor ``(L, E-1)``, and every individual and batch-index ack cleared, so
the subscription re-reads everything from the position on.

Why it cannot race ``trim`` into a deleted ledger: the target ledger is checked
against the managed ledger's ledger list, and the cursor is written in one
multi-op that also checks the managed-ledger node's version as read; ``trim``
does the mirror image (checks the cursor version, CAS-puts the ledger list).
Whichever commits second fails its check; a reset that lost re-reads and
re-validates (a reset is absolute, so re-applying it is correct).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tenacity import Retrying

from deletion_service.failpoints import failpoint
from metastore import CheckVersion, MetadataStore
from metastore.formats import FormatError, ManagedLedgerInfo, decode_managed_ledger, managed_ledger_path
from metastore.formats.node_reader import MissingNodeError, read_decoded
from metastore.retry import read_retry

from . import persistence
from .ack_budget import PersistBudget
from .epoch import EpochObserver, ManagedCursor
from .exceptions import CursorError, CursorVersionConflictError
from .persistence import PersistObserver
from .position import Position, predecessor


class InvalidResetPosition(CursorError):
    """The target position is not in the managed ledger (trimmed, never existed, past a ledger's end)."""


@dataclass(frozen=True)
class ResetOutcome:
    topic: str
    subscription: str
    previous: Position  # the read position before (mark-delete + 1 as stored)
    position: Position  # the new read position
    mark_delete: Position
    epoch: int  # of the in-memory cursor that ran the change (the node's version is its persistent trace)
    version: int  # the cursor node's new version


def reset_in_memory(cursor: ManagedCursor, position: Position) -> int:
    """The cursor-only reset through the epoch; returns the new epoch."""
    cursor.start_increase_epoch(lambda: Position(*position))
    try:
        cursor.set_mark_delete_in_change(predecessor(position), clear_acks=True)
    finally:
        cursor.end_increase_epoch()
    return cursor.epoch


def check_position(ml: ManagedLedgerInfo, topic: str, position: Position) -> None:
    """The position must be inside a ledger the managed ledger still lists."""
    ids = [ledger.ledger_id for ledger in ml.ledgers]
    if position.ledger_id not in ids:
        span = f"ledgers {ids[0]}..{ids[-1]}" if ids else "no ledgers"
        raise InvalidResetPosition(
            f"ledger {position.ledger_id} is not in the managed ledger of {topic} ({span}); "
            "it may have been trimmed")
    ledger = ml.ledgers[ids.index(position.ledger_id)]
    is_last = ledger is ml.ledgers[-1]
    if not is_last and ledger.entries is not None and position.entry_id >= ledger.entries:
        raise InvalidResetPosition(
            f"entry {position.entry_id} is past the end of ledger {position.ledger_id} "
            f"({ledger.entries} entries) of {topic}")


def reset_stored_cursor(store: MetadataStore, topic: str, subscription: str, position: Position, *,
                        attempts: int = 5, observer: EpochObserver | None = None,
                        budget: PersistBudget | None = None, persist_observer: PersistObserver | None = None,
                        retry: Callable[[], Retrying] = read_retry) -> ResetOutcome:
    """Reset the stored cursor to ``position``; retries when the cursor or the ledger list moved.

    Each read is wrapped in ``retry`` (the store tries once), so a brief
    reconnect is ridden out; the write is not, because a write whose reply
    was lost may have been applied: the version-conflict loop re-reads instead.

    ``observer`` sees the whole reset as one epoch increase: its task state is
    1 from the first read to the write, and it counts only a reset that was
    written (a lost race that is retried is not a second increase).
    """
    ml_path = managed_ledger_path(topic)
    committed = False
    if observer is not None:
        observer.on_start()
    try:
        for attempt in range(attempts):
            stored = retry()(persistence.load, store, topic, subscription)
            ml, ml_version = _read_ledger_list(store, topic, ml_path, retry)
            check_position(ml, topic, position)
            cursor = persistence.to_cursor(stored)
            previous = cursor.read_position
            epoch = reset_in_memory(cursor, position)
            failpoint("cursor.reset-before-write")
            try:
                saved = persistence.save(store, stored, cursor, guards=[CheckVersion(ml_path, ml_version)],
                                         budget=budget, observer=persist_observer)
            except CursorVersionConflictError:
                if attempt + 1 == attempts:
                    raise
                continue
            committed = True
            return ResetOutcome(topic, subscription, previous, cursor.read_position, cursor.mark_delete_position,
                                epoch, saved.version)
        raise AssertionError("unreachable")
    finally:
        if observer is not None:
            observer.on_end(committed)


def _read_ledger_list(store: MetadataStore, topic: str, ml_path: str,
                      retry: Callable[[], Retrying]) -> tuple[ManagedLedgerInfo, int]:
    try:
        ml, node = retry()(read_decoded, store, ml_path, decode_managed_ledger, "managed-ledger")
    except MissingNodeError as e:
        raise CursorError(f"no managed-ledger node for {topic} at {ml_path}") from e
    except FormatError as e:
        raise CursorError(str(e)) from e
    return ml, node.version
