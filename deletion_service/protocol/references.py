"""What references a ledger, and what proves it never will again: ONE pure model.

The delete phase ("is this ledger still in use?") and the orphan scan ("is this
ledger referenced anywhere?") must give the same answer for every kind of
ledger Pulsar writes, or one of them deletes live data or reports it as an
orphan.  So both ask this module, and ``tests/integration/orphans/test_reference_model_agreement.py``
checks that they agree kind by kind (the model alone: ``tests/unit/test_reference_model.py``).
No I/O: callers decode nodes, this module reads them.

The kinds, and where Pulsar records each reference (Pulsar 3.x/4.x):

* ``ledger``: a data ledger listed in its managed ledger's node;
* ``offload``: a (ledger, uuid) pair an offload context names (its own uuid and each
  streaming segment's): the objects under *that* uuid are the live copy; objects
  of the same ledger under another uuid are the leftovers of a failed offload;
* ``cursor``: the cursor ledger of a cursor whose state lives in BookKeeper
  (``cursorsLedgerId`` ≠ −1);
* ``schema``: every ledger a schema locator's entries name;
* ``compacted``: property ``CompactedTopicLedger`` of the ``__compaction`` cursor;
* ``delayed-bucket``: PIP-195 bucket snapshot ledgers, named by the cursor's
  ``cursorProperties`` entries ``#pulsar.internal.delayed.bucket_<start>_<end>`` (value:
  the ledger id).

What the metadata store cannot show: a ``__compaction`` cursor that keeps its
state in a cursor ledger may name a newer compacted ledger there than in its
node.  :attr:`TopicMetadata.hidden` says so, and every compacted ledger of that
topic then counts as referenced.

Why a young ledger needs proof (:func:`superseded`): Pulsar creates a ledger
*before* it writes the reference to it (rollover, a new cursor ledger, a schema
version, a compaction, a bucket snapshot), so for a moment every new ledger is
unreferenced.  Ledger ids only grow (BookKeeper's id generator), and each owner
records its ledgers in id order; so an unreferenced ledger *older* than one its
owner already records can never be recorded later.  That, or its owner's
absence where the owner is always written before its ledgers, is the proof a
request's ``reason`` used to stand in for.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property

from metastore.formats import LedgerMetadata, ManagedCursorInfo, ManagedLedgerInfo, SchemaLocator, subscription_name
from metastore.formats.custom_metadata import (
    APPLICATION_KEY,
    APPLICATION_PULSAR,
    COMPONENT_COMPACTED_LEDGER,
    COMPONENT_DELAYED_INDEX_BUCKET,
    COMPONENT_KEY,
    COMPONENT_MANAGED_LEDGER,
    COMPONENT_SCHEMA,
    CURSOR_KEY,
)
from offloaders.interface import java_uuid

COMPACTION_CURSOR = "__compaction"
COMPACTED_LEDGER_PROPERTY = "CompactedTopicLedger"
#: PIP-195: ``cursorProperties`` key prefix of a delayed-delivery bucket's snapshot ledger.
DELAYED_BUCKET_PREFIX = "#pulsar.internal.delayed.bucket_"


class ReferenceKind(StrEnum):
    """The ways Pulsar's metadata reaches a ledger (the scan's ``kind`` column)."""

    LEDGER = "ledger"
    CURSOR = "cursor"
    SCHEMA = "schema"
    COMPACTED = "compacted"
    DELAYED_BUCKET = "delayed-bucket"


class LedgerKind(StrEnum):
    """What BookKeeper's custom metadata says a ledger is (``other``: not Pulsar's, or a kind we don't know)."""

    DATA = "data"
    CURSOR = "cursor"
    SCHEMA = "schema"
    COMPACTED = "compacted"
    DELAYED_BUCKET = "delayed-bucket"
    OTHER = "other"


def ledger_kind(custom: Mapping[str, str | None]) -> LedgerKind:
    """The kind a ledger's custom metadata (values as text) proves."""
    if custom.get(APPLICATION_KEY) != APPLICATION_PULSAR:
        return LedgerKind.OTHER
    component = custom.get(COMPONENT_KEY)
    if component == COMPONENT_MANAGED_LEDGER:
        return LedgerKind.CURSOR if custom.get(CURSOR_KEY) is not None else LedgerKind.DATA
    return {COMPONENT_SCHEMA: LedgerKind.SCHEMA, COMPONENT_COMPACTED_LEDGER: LedgerKind.COMPACTED,
            COMPONENT_DELAYED_INDEX_BUCKET: LedgerKind.DELAYED_BUCKET}.get(component or "", LedgerKind.OTHER)


def kind_of(metadata: LedgerMetadata) -> LedgerKind:
    return ledger_kind(metadata.custom_texts)


class UnreadableReference(ValueError):
    """A reference that exists but cannot be read (e.g. a bucket property whose value is no ledger id):
    every ledger it might name is then unprovable, never unreferenced."""


@dataclass(frozen=True)
class Reference:
    """One way one ledger is reached."""

    ledger_id: int
    kind: ReferenceKind
    topic: str  # persistent://tenant/ns/local
    detail: str | None = None  # a key of ``TopicMetadata.cursors`` (cursor, delayed-bucket), the schema id
    offloaded: bool = False  # kind ledger: a complete offload context
    bookkeeper_deleted: bool = False  # … whose BookKeeper copy Pulsar already deleted

    @property
    def why(self) -> str:
        match self.kind:
            case ReferenceKind.LEDGER:
                return f"listed in the managed ledger of {self.topic}" + (" (offloaded)" if self.offloaded else "")
            case ReferenceKind.CURSOR:
                return f"cursor ledger of subscription {subscription_name(self.detail or '')!r} of {self.topic}"
            case ReferenceKind.SCHEMA:
                return f"schema ledger of {self.detail}"
            case ReferenceKind.COMPACTED:
                return f"compacted-topic ledger of {self.topic}"
            case ReferenceKind.DELAYED_BUCKET:
                return f"delayed-delivery bucket {self.detail} of subscription of {self.topic}"
        raise AssertionError(self.kind)


@dataclass(frozen=True)
class OffloadReference:
    """A (ledger, uuid) pair an offload context names: the objects under that uuid are live."""

    ledger_id: int
    uuid: str
    topic: str
    driver_name: str | None  # the segment's own driver metadata, else the context's
    driver_metadata: tuple[tuple[str, str], ...] = ()
    segment: bool = False


@dataclass(frozen=True)
class TopicMetadata:
    """Everything the metadata store holds about one topic's references (decoded; absent = None)."""

    topic: str
    managed_ledger: ManagedLedgerInfo | None = None
    #: by the cursor's name as Pulsar writes it: its node's name, which a cursor ledger's ``pulsar/cursor``
    #: repeats (the subscription URL-encoded: ``metastore.formats.pulsar_cursor_name``), never decoded
    cursors: Mapping[str, ManagedCursorInfo] = field(default_factory=dict)
    schema: SchemaLocator | None = None
    schema_id: str | None = None

    @property
    def hidden(self) -> str | None:
        """Why some of this topic's references cannot be seen here (``None``: all can)."""
        compaction = self.cursors.get(COMPACTION_CURSOR)
        if compaction is not None and not compaction.state_in_metadata_store:
            return (f"the {COMPACTION_CURSOR} cursor of {self.topic} keeps its state in cursor ledger "
                    f"{compaction.cursors_ledger_id}: the compacted ledger it names there may be newer")
        return None

    def references(self) -> Iterator[Reference]:
        """Every ledger reference this topic's metadata proves.  Raises :class:`UnreadableReference`."""
        if self.managed_ledger is not None:
            for ledger in self.managed_ledger.ledgers:
                ctx = ledger.offload_context
                yield Reference(ledger.ledger_id, ReferenceKind.LEDGER, self.topic,
                                offloaded=ctx is not None and bool(ctx.complete),
                                bookkeeper_deleted=ctx is not None and bool(ctx.bookkeeper_deleted))
        for name, cursor in sorted(self.cursors.items()):
            yield from cursor_references(self.topic, name, cursor)
        if self.schema is not None:
            for ledger_id in self.schema.ledger_ids():
                yield Reference(ledger_id, ReferenceKind.SCHEMA, self.topic, self.schema_id)

    @cached_property
    def references_by_ledger(self) -> dict[int, tuple[Reference, ...]]:
        """:meth:`references` by ledger id, built once: a batch asks one owner about many ledgers.
        Raises :class:`UnreadableReference` (each time asked: nothing is cached then)."""
        out: dict[int, list[Reference]] = {}
        for ref in self.references():
            out.setdefault(ref.ledger_id, []).append(ref)
        return {ledger_id: tuple(refs) for ledger_id, refs in out.items()}

    @cached_property
    def offload_references_by_uuid(self) -> dict[str, tuple[OffloadReference, ...]]:
        """:meth:`offload_references` by uuid, built once."""
        out: dict[str, list[OffloadReference]] = {}
        for ref in self.offload_references():
            out.setdefault(ref.uuid, []).append(ref)
        return {uuid: tuple(refs) for uuid, refs in out.items()}

    @cached_property
    def offload_uuids_by_ledger(self) -> dict[int, frozenset[str]]:
        """The uuids each ledger's offload context names, built once."""
        out: dict[int, set[str]] = {}
        for ref in self.offload_references():
            out.setdefault(ref.ledger_id, set()).add(ref.uuid)
        return {ledger_id: frozenset(uuids) for ledger_id, uuids in out.items()}

    @cached_property
    def listed(self) -> frozenset[int]:
        """The ledger ids the managed ledger lists."""
        return frozenset(self.managed_ledger.ledger_ids()) if self.managed_ledger is not None else frozenset()

    @cached_property
    def newest_ledger(self) -> int | None:
        """The highest ledger id the managed ledger lists (``None``: none listed, or no node)."""
        return max(self.listed, default=None)

    def offload_references(self) -> Iterator[OffloadReference]:
        if self.managed_ledger is None:
            return
        for ledger in self.managed_ledger.ledgers:
            ctx = ledger.offload_context
            if ctx is None:
                continue
            here = (ctx.driver_name, tuple(sorted(ctx.driver_metadata.items())))
            if ctx.uid_msb or ctx.uid_lsb:  # zero: protobuf's "unset"
                yield OffloadReference(ledger.ledger_id, java_uuid(ctx.uid_msb or 0, ctx.uid_lsb or 0),
                                       self.topic, *here)
            for seg in ctx.segments:
                if seg.uid_msb or seg.uid_lsb:
                    where = (seg.driver_name, tuple(sorted(seg.driver_metadata.items()))) if seg.driver_name else here
                    yield OffloadReference(ledger.ledger_id, java_uuid(seg.uid_msb or 0, seg.uid_lsb or 0),
                                           self.topic, *where, segment=True)


def cursor_references(topic: str, name: str, cursor: ManagedCursorInfo) -> Iterator[Reference]:
    """The ledgers one cursor reaches: its cursor ledger, the compacted ledger, its bucket snapshots."""
    if not cursor.state_in_metadata_store and cursor.cursors_ledger_id >= 0:
        yield Reference(cursor.cursors_ledger_id, ReferenceKind.CURSOR, topic, name)
    if name == COMPACTION_CURSOR and COMPACTED_LEDGER_PROPERTY in cursor.properties:
        yield Reference(cursor.properties[COMPACTED_LEDGER_PROPERTY], ReferenceKind.COMPACTED, topic)
    for key, value in sorted(cursor.cursor_properties.items()):
        if key.startswith(DELAYED_BUCKET_PREFIX):
            try:
                ledger_id = int(value, 10)
            except ValueError:
                raise UnreadableReference(f"cursor {name!r} of {topic}: bucket property {key!r} holds "
                                          f"{value[:40]!r}, not a ledger id") from None
            yield Reference(ledger_id, ReferenceKind.DELAYED_BUCKET, topic, name)


# --------------------------------------------------------------------------- the proof a young ledger needs


def superseded(kind: LedgerKind, ledger_id: int, owner: TopicMetadata, cursor: str | None = None,
               owner_exists: bool | None = None) -> str | None:
    """Why ``owner``'s metadata proves the (unreferenced) ledger can never be referenced again, or ``None``.

    ``owner`` is the topic BookKeeper's metadata names (never the request's claim);
    ``owner_exists`` whether its managed-ledger node exists (``None``: not read).
    Read BookKeeper's node *before* the owner's: then "owner absent" means it
    went away after the ledger was created, not that it is about to be written."""
    newest = owner.newest_ledger
    match kind:
        case LedgerKind.DATA:
            if owner_exists is False:
                return f"its managed ledger {owner.topic} no longer exists (written before its first ledger)"
            if newest is not None and newest > ledger_id:
                return f"{owner.topic} already lists newer ledger {newest}"
        case LedgerKind.CURSOR:
            if owner_exists is False:
                return f"its managed ledger {owner.topic} no longer exists"
            state = owner.cursors.get(cursor or "")
            if state is not None and not state.state_in_metadata_store and state.cursors_ledger_id > ledger_id:
                return f"cursor {cursor!r} already uses newer cursor ledger {state.cursors_ledger_id}"
        case LedgerKind.SCHEMA:
            ids = owner.schema.ledger_ids() if owner.schema is not None else []
            if ids and ids[-1] > ledger_id:
                return f"schema {owner.schema_id} already records newer ledger {ids[-1]}"
        case _:
            # A compaction or a bucket snapshot may be recorded long after a newer one of another
            # cursor: ids prove nothing there.  Those kinds always wait out the age guard.
            pass
    return None


def offload_superseded(ledger_id: int, uuids: frozenset[str], owner: TopicMetadata,
                       owner_exists: bool | None = None) -> str | None:
    """Why the objects of ``ledger_id`` under ``uuids`` can never be recorded again, or ``None``.

    Pulsar records an offload's uuid in the ledger's context *before* it writes
    the first object (``prepareLedgerInfoForOffloaded``), so objects under a uuid
    the context no longer names are a replaced attempt's; and a ledger gone from
    the list below a newer listed one was trimmed."""
    if owner_exists is False:
        return f"its managed ledger {owner.topic} no longer exists"
    if owner.managed_ledger is None:
        return None
    if ledger_id not in owner.listed:
        newest = owner.newest_ledger
        if newest is not None and newest > ledger_id:
            return f"{owner.topic} no longer lists it and already lists newer ledger {newest}"
        return None
    named = owner.offload_uuids_by_ledger.get(ledger_id, frozenset())
    if named and not (named & uuids):
        return f"its offload context now names {sorted(named)}, a later offload"
    return None
