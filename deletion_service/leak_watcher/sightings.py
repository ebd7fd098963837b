"""What one reading of the metadata store saw referenced, topic by topic. Pure.

A topic's sightings keep what a request for each of its ledgers needs, should the ledger leave,
and no more, since a reading of a whole cluster is kept between passes: the id of a listed ledger
(a BookKeeper request names only that and its topic), the whole ``LedgerInfo`` of one with an
offload context (the context names the parts and where they were written), and for every other
kind its component, cursor or schema.  Built from the one reference model the scan and the delete
phase share (:mod:`deletion_service.protocol.references`), so the watcher cannot call a ledger
unreferenced that either of them would call referenced.

A topic's sightings may carry a *stamp* of the nodes they were read from (each node's version and
creation time): the next reading reuses them when the stamp is unchanged instead of decoding the
nodes again.  The stamp takes no part in comparing sightings.
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from deletion_service.protocol.references import ReferenceKind, TopicMetadata
from deletion_service.protocol.request import LedgerComponent
from metastore.formats import LedgerInfo, subscription_name

#: The request component of each kind of reference other than a listed ledger.
COMPONENTS: Mapping[ReferenceKind, LedgerComponent] = {
    ReferenceKind.CURSOR: LedgerComponent.MANAGED_CURSOR,
    ReferenceKind.SCHEMA: LedgerComponent.SCHEMA_STORAGE,
    ReferenceKind.COMPACTED: LedgerComponent.COMPACTED_LEDGER,
    ReferenceKind.DELAYED_BUCKET: LedgerComponent.DELAYED_INDEX_BUCKET,
}

_NONE_OFFLOADED: Mapping[int, LedgerInfo] = {}
_NO_PARTS: frozenset[tuple[int, str]] = frozenset()  # shared: an empty frozenset is an object of its own


class Listed(Mapping[int, LedgerInfo]):
    """A managed ledger's listed ledgers, in list order, as a request for each needs them: a ledger
    with an offload context as listed, any other as its id alone (``LedgerInfo(id)``: its entries,
    size and timestamp name no copy).  Ids are kept in an array, 8 bytes each."""

    __slots__ = ("_ids", "_offloaded")

    def __init__(self, ledgers: Iterable[LedgerInfo] = ()) -> None:
        infos = {ledger.ledger_id: ledger for ledger in ledgers}
        self._ids = array("q", infos)
        offloaded = {lid: info for lid, info in infos.items() if info.offload_context is not None}
        self._offloaded = offloaded or _NONE_OFFLOADED

    @classmethod
    def of(cls, ids: Iterable[int], offloaded: Iterable[LedgerInfo] = ()) -> Listed:
        """Ledgers given by id, and those of ``offloaded`` as given (each in its place among ``ids``)."""
        listed = cls.__new__(cls)
        listed._ids = array("q", dict.fromkeys(ids))
        listed._offloaded = {info.ledger_id: info for info in offloaded} or _NONE_OFFLOADED
        return listed

    def __getitem__(self, ledger_id: int) -> LedgerInfo:
        info = self._offloaded.get(ledger_id)
        if info is not None:
            return info
        if ledger_id in self._ids:
            return LedgerInfo(ledger_id)
        raise KeyError(ledger_id)

    def __contains__(self, ledger_id: object) -> bool:
        return ledger_id in self._ids

    def __iter__(self) -> Iterator[int]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Listed):
            return self._ids == other._ids and self._offloaded == other._offloaded
        return Mapping.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]  # a mapping

    def __repr__(self) -> str:
        return f"Listed({[self[lid] for lid in self._ids]!r})"

    @property
    def ids(self) -> array:
        return self._ids

    @property
    def offloaded(self) -> Mapping[int, LedgerInfo]:
        """The listed ledgers with an offload context, by id."""
        return self._offloaded


def _listed(value: Mapping[int, LedgerInfo] | Iterable[LedgerInfo]) -> Listed:
    if isinstance(value, Listed):
        return value
    return Listed(value.values() if isinstance(value, Mapping) else value)


@dataclass(frozen=True, slots=True)
class OwnedLedger:
    """A ledger a cursor, a schema, compaction or a delayed-delivery bucket references."""

    ledger_id: int
    component: LedgerComponent
    cursor: str | None = None  # MANAGED_CURSOR, DELAYED_INDEX_BUCKET
    schema_id: str | None = None  # SCHEMA_STORAGE


@dataclass(frozen=True, slots=True)
class TopicSightings:
    """One topic's references at one reading.  ``listed`` may be given as any mapping of ledger id to
    ``LedgerInfo`` (or the infos themselves): it is kept as :class:`Listed`."""

    topic: str
    listed: Mapping[int, LedgerInfo] = field(default_factory=Listed)
    owned: tuple[OwnedLedger, ...] = ()
    parts: frozenset[tuple[int, str]] = _NO_PARTS  # (ledger id, uuid) an offload context names
    stamp: Hashable = field(default=None, compare=False)  # of the nodes read, when read from a store

    def __post_init__(self) -> None:
        object.__setattr__(self, "listed", _listed(self.listed))

    def ledger_ids(self) -> set[int]:
        return set(self.listed) | {o.ledger_id for o in self.owned}


def sightings_of(meta: TopicMetadata) -> TopicSightings:
    """What ``meta`` references.  Raises :class:`~deletion_service.protocol.references.UnreadableReference`
    when a reference cannot be read: the caller then keeps that topic's previous sightings, so nothing
    it referenced can look departed."""
    listed = Listed(meta.managed_ledger.ledgers) if meta.managed_ledger else Listed()
    owned: list[OwnedLedger] = []
    # every reference but the listed ledgers (kept above): the model's own, of the topic without its list
    for ref in replace(meta, managed_ledger=None).references():
        component = COMPONENTS[ref.kind]
        owned.append(OwnedLedger(
            ref.ledger_id, component,
            cursor=_cursor_as_stamped(component, ref.detail),
            schema_id=ref.detail if component == LedgerComponent.SCHEMA_STORAGE else None))
    parts = frozenset((ref.ledger_id, ref.uuid) for ref in meta.offload_references())
    return TopicSightings(meta.topic, listed, tuple(owned), parts or _NO_PARTS)


def _cursor_as_stamped(component: LedgerComponent, cursor: str | None) -> str | None:
    """The cursor as the ledger's own ``pulsar/cursor`` names it, which a request must repeat: a cursor
    ledger carries the cursor's name (the model's: the subscription URL-encoded), a bucket snapshot the
    subscription itself (upstream hands its bucket storage the decoded name)."""
    if cursor is None:
        return None
    match component:
        case LedgerComponent.MANAGED_CURSOR:
            return cursor
        case LedgerComponent.DELAYED_INDEX_BUCKET:
            return subscription_name(cursor)
        case _:
            return None


def topic_sightings(metas: Iterable[TopicMetadata], stamp: Hashable = None) -> TopicSightings:
    """One topic's sightings from its nodes (its managed ledger and its schema are read apart).
    Raises :class:`~deletion_service.protocol.references.UnreadableReference` as :func:`sightings_of`."""
    seen: TopicSightings | None = None
    for meta in metas:
        one = sightings_of(meta)
        seen = one if seen is None else merged(seen, one)
    assert seen is not None, "a topic's sightings need one of its nodes"
    return TopicSightings(seen.topic, seen.listed, seen.owned, seen.parts, stamp)


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

    def referenced_among(self, ledgers: set[int], parts: set[tuple[int, str]]) -> tuple[set[int], set[tuple[int, str]]]:
        """Which of ``ledgers`` and ``parts`` some topic references: one look at every topic, without
        gathering everything referenced (a cluster's worth of ids)."""
        found: set[int] = set()
        found_parts: set[tuple[int, str]] = set()
        if not ledgers and not parts:
            return found, found_parts
        for seen in self.topics.values():
            ids = seen.listed.ids  # type: ignore[attr-defined]  # always a Listed (TopicSightings.__post_init__)
            if ledgers and not ledgers.isdisjoint(ids):
                found |= ledgers.intersection(ids)
            for owned in seen.owned:
                if owned.ledger_id in ledgers:
                    found.add(owned.ledger_id)
            if parts and seen.parts and not parts.isdisjoint(seen.parts):
                found_parts |= parts & seen.parts
        return found, found_parts


def merged(a: TopicSightings, b: TopicSightings) -> TopicSightings:
    """One topic's sightings from two of its nodes (its managed ledger and its schema are read apart)."""
    listed: dict[int, LedgerInfo] = {**a.listed, **b.listed}
    return TopicSightings(a.topic, listed, (*a.owned, *b.owned), (a.parts | b.parts) or _NO_PARTS)


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
