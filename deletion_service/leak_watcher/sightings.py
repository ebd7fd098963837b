"""What one reading of the metadata store saw referenced, topic by topic. Pure.

A topic's sightings keep what a request for each of its ledgers needs, should the ledger leave:
a listed ledger's whole ``LedgerInfo`` (its offload context names the parts and where they were
written), and for every other kind its component, cursor or schema.  Built from the one reference
model the scan and the delete phase share (:mod:`deletion_service.protocol.references`), so the
watcher cannot call a ledger unreferenced that either of them would call referenced.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from deletion_service.protocol.references import ReferenceKind, TopicMetadata
from deletion_service.protocol.request import LedgerComponent
from metastore.formats import LedgerInfo

#: The request component of each kind of reference other than a listed ledger.
COMPONENTS: Mapping[ReferenceKind, LedgerComponent] = {
    ReferenceKind.CURSOR: LedgerComponent.MANAGED_CURSOR,
    ReferenceKind.SCHEMA: LedgerComponent.SCHEMA_STORAGE,
    ReferenceKind.COMPACTED: LedgerComponent.COMPACTED_LEDGER,
    ReferenceKind.DELAYED_BUCKET: LedgerComponent.DELAYED_INDEX_BUCKET,
}


@dataclass(frozen=True)
class OwnedLedger:
    """A ledger a cursor, a schema, compaction or a delayed-delivery bucket references."""

    ledger_id: int
    component: LedgerComponent
    cursor: str | None = None  # MANAGED_CURSOR, DELAYED_INDEX_BUCKET
    schema_id: str | None = None  # SCHEMA_STORAGE


@dataclass(frozen=True)
class TopicSightings:
    """One topic's references at one reading."""

    topic: str
    listed: Mapping[int, LedgerInfo] = field(default_factory=dict)
    owned: tuple[OwnedLedger, ...] = ()
    parts: frozenset[tuple[int, str]] = frozenset()  # (ledger id, uuid) an offload context names

    def ledger_ids(self) -> set[int]:
        return set(self.listed) | {o.ledger_id for o in self.owned}


def sightings_of(meta: TopicMetadata) -> TopicSightings:
    """What ``meta`` references.  Raises :class:`~deletion_service.protocol.references.UnreadableReference`
    when a reference cannot be read: the caller then keeps that topic's previous sightings, so nothing
    it referenced can look departed."""
    listed = {ledger.ledger_id: ledger for ledger in meta.managed_ledger.ledgers} if meta.managed_ledger else {}
    owned: list[OwnedLedger] = []
    for ref in meta.references():
        component = COMPONENTS.get(ref.kind)
        if component is None:  # a listed ledger: kept whole above
            continue
        owned.append(OwnedLedger(
            ref.ledger_id, component,
            cursor=ref.detail if component in (LedgerComponent.MANAGED_CURSOR, LedgerComponent.DELAYED_INDEX_BUCKET)
            else None,
            schema_id=ref.detail if component == LedgerComponent.SCHEMA_STORAGE else None))
    parts = frozenset((ref.ledger_id, ref.uuid) for ref in meta.offload_references())
    return TopicSightings(meta.topic, listed, tuple(owned), parts)


@dataclass(frozen=True)
class Reading:
    """Every topic's sightings at one reading, and the topics that could not be read this time."""

    topics: Mapping[str, TopicSightings]
    unreadable: frozenset[str] = frozenset()
    #: namespaces (``tenant/ns``) whose listing or a node of which could not be read: all their topics unknown
    unreadable_namespaces: frozenset[str] = frozenset()

    def knows(self, topic: str) -> bool:
        """Whether this reading could read ``topic`` (absent from it then means gone)."""
        return topic not in self.unreadable and namespace_of(topic) not in self.unreadable_namespaces

    def referenced(self) -> tuple[set[int], set[tuple[int, str]]]:
        """Every ledger id and every (ledger id, uuid) part referenced anywhere."""
        ledgers: set[int] = set()
        parts: set[tuple[int, str]] = set()
        for seen in self.topics.values():
            ledgers |= seen.ledger_ids()
            parts |= seen.parts
        return ledgers, parts


def merged(a: TopicSightings, b: TopicSightings) -> TopicSightings:
    """One topic's sightings from two of its nodes (its managed ledger and its schema are read apart)."""
    return TopicSightings(a.topic, {**a.listed, **b.listed}, (*a.owned, *b.owned), a.parts | b.parts)


def namespace_of(topic: str) -> str:
    """``persistent://t/ns/x`` → ``t/ns``."""
    return "/".join(topic.partition("://")[2].split("/")[:2])


def reading_of(metas: Iterable[TopicMetadata], unreadable: Iterable[str] = (),
               unreadable_namespaces: Iterable[str] = ()) -> Reading:
    """A reading of ``metas`` (a topic may come twice: its managed ledger, its schema); a topic whose
    references cannot be read joins ``unreadable``, and what was read of it is dropped."""
    topics: dict[str, TopicSightings] = {}
    failed = set(unreadable)
    for meta in metas:
        try:
            seen = sightings_of(meta)
        except ValueError:  # UnreadableReference
            failed.add(meta.topic)
            continue
        topics[meta.topic] = merged(topics[meta.topic], seen) if meta.topic in topics else seen
    return Reading({t: s for t, s in topics.items() if t not in failed}, frozenset(failed),
                   frozenset(unreadable_namespaces))
