"""Load and save a cursor as its ``ManagedCursorInfo`` node, with compare-and-set on the version.

Only cursors whose state lives in the metadata store (``cursorsLedgerId == -1``)
are handled: for any other, the node is a snapshot that may be behind the
BookKeeper cursor ledger — or ahead of it after a backward reset — so editing
it would be acting on facts we cannot see (DESIGN "What we cannot see").

Every save rewrites the node even if nothing changed: an occasional read
position change must move the node's version, because that version is what the
mark phase checks in its atomic multi-op.  Fields we do not model (properties,
cursor properties, lastActive, unknown fields, compression) are written back
as read.

What is written is held to a :class:`~.ack_budget.PersistBudget` (capped at
the store's request limit): a state that does not fit is persisted as the
longest prefix that does, with a WARN and the size gauges, never cut silently
and never sent to ZooKeeper at a size that would drop the connection.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol

from metastore import BadVersionError, CheckVersion, MetadataStore, MultiOpError, Put
from metastore.formats import FormatError, ManagedCursorInfo, cursor_path, decode_cursor, encode_cursor
from metastore.formats.node_reader import MissingNodeError, read_decoded
from metastore.interface import MetadataStoreError, MetadataStoreUnavailable, NotSentError
from metastore.retry import read_retry

from .ack_budget import PersistBudget, PersistPlan, plan_persist, warn_if_incomplete
from .acks import AckState
from .epoch import EpochObserver, ManagedCursor
from .exceptions import CursorError, CursorLedgerBackedError, CursorNotFoundError, CursorVersionConflictError

NO_CURSOR_LEDGER = -1


class PersistObserver(Protocol):
    """Told the cursor's full metadata size and the budget after each persist (the size gauges)."""

    def on_persist(self, full_size: int, budget: int) -> None: ...


@dataclasses.dataclass(frozen=True)
class StoredCursor:
    """A cursor node as read: where, what, and at which version."""

    path: str
    info: ManagedCursorInfo
    version: int


def load(store: MetadataStore, topic: str, subscription: str) -> StoredCursor:
    """Read and decode the cursor node; refuse a missing, undecodable or cursor-ledger-backed one."""
    path = cursor_path(topic, subscription)
    try:
        info, node = read_decoded(store, path, decode_cursor, "cursor")
    except MissingNodeError as e:
        raise CursorNotFoundError(f"no cursor node for subscription {subscription!r} of {topic} at {path}") from e
    except FormatError as e:
        raise CursorError(str(e)) from e
    if info.cursors_ledger_id != NO_CURSOR_LEDGER:
        raise CursorLedgerBackedError(
            f"cursor {subscription!r} of {topic} keeps its state in BookKeeper cursor ledger "
            f"{info.cursors_ledger_id}, which this tool cannot see; use pulsar-admin topics reset-cursor")
    if info.mark_delete is None:
        raise CursorError(f"the cursor node at {path} has no mark-delete position")
    return StoredCursor(path, info, node.version)


def to_cursor(stored: StoredCursor, *, epoch_checks: bool = True,
              observer: EpochObserver | None = None) -> ManagedCursor:
    """The in-memory cursor (epoch 0) for a stored node; read position = mark-delete + 1."""
    info = stored.info
    assert info.mark_delete is not None
    try:
        acks = AckState(info.individual_deleted_messages, info.batched_entry_deletion_index_info)
    except ValueError as e:
        raise CursorError(f"cannot load the acks of the cursor node at {stored.path}: {e}") from e
    name = stored.path.rsplit("/", 1)[-1]
    return ManagedCursor(name, info.mark_delete, acks=acks, epoch_checks=epoch_checks, observer=observer)


def to_info(stored: StoredCursor, cursor: ManagedCursor, budget: PersistBudget | None = None) -> PersistPlan:
    """The node content for ``cursor`` within ``budget``: our positions and acks, everything else as read.

    Records the full size on the cursor (``metadata_size``), which is what pauses its dispatcher.
    """
    info = dataclasses.replace(stored.info, mark_delete=cursor.mark_delete_position)
    plan = plan_persist(info, cursor.acks, budget or PersistBudget())
    cursor.metadata_size = plan.full_size
    warn_if_incomplete(plan, f"{cursor.name!r} at {stored.path}")
    return plan


def save(store: MetadataStore, stored: StoredCursor, cursor: ManagedCursor,
         guards: Sequence[CheckVersion] = (), budget: PersistBudget | None = None,
         observer: PersistObserver | None = None) -> StoredCursor:
    """CAS-write the cursor at the version it was read (plus ``guards``, atomically); the new node.

    :class:`CursorVersionConflictError` when the cursor or a guarded node moved.  A write whose
    reply was lost is read back (:func:`_landed`), never repeated: applied, it counts as written
    (a rerun would reset again and bump the epoch twice); otherwise the store's error stands.
    """
    plan = to_info(stored, cursor, (budget or PersistBudget()).capped(store.max_request_bytes))
    data = encode_cursor(plan.info)
    try:
        if guards:
            versions = store.multi([*guards, Put(stored.path, data, stored.version)])
            version = versions[-1]
            assert version is not None
        else:
            version = store.put(stored.path, data, stored.version)
    except BadVersionError as e:
        raise CursorVersionConflictError(f"cursor node {stored.path} changed since it was read") from e
    except MultiOpError as e:
        if isinstance(e.cause, BadVersionError):
            raise CursorVersionConflictError(f"{e.op.path} changed since it was read") from e
        raise
    except MetadataStoreUnavailable as e:
        if isinstance(e, NotSentError) or not _landed(store, stored, data):
            raise
        version = stored.version + 1
    if observer is not None:
        observer.on_persist(plan.full_size, plan.budget)
    return StoredCursor(stored.path, plan.info, version)


def _landed(store: MetadataStore, stored: StoredCursor, data: bytes) -> bool:
    """Whether a cursor write whose reply was lost was applied: one version later, exactly our bytes
    (the write is atomic with its guards, so they held).  A failed read or any other node: not known,
    so not claimed."""
    try:
        node = read_retry()(store.get, stored.path)
    except MetadataStoreError:
        return False
    return node is not None and node.version == stored.version + 1 and node.data == data
