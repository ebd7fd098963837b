"""What left every reference between two readings, as the requests a leak of it would need. Pure.

A ledger departs when some topic referenced it at the first reading and no topic references it at
the second; an offloaded part, (ledger, uuid), when no offload context names it any more (the
ledger may still be listed: a re-offload replaced the context).  A topic that could not be read at
the second reading keeps its first reading's sightings, so nothing it referenced departs: a
reading that fails is never evidence that something was deleted.

The requests are built as the mark phase builds them (:func:`deletion_service.mark_phase.pick.requests_for`),
one per copy, with reason ``leaked``; a part whose objects cannot be named or located gets no
request, and :attr:`Departure.unrequestable` says why (for the operator; the scan reports it too).
"""

from __future__ import annotations

from dataclasses import dataclass

from deletion_service.leak_watcher.sightings import OwnedLedger, Reading, TopicSightings
from deletion_service.mark_phase.pick import OffloadLocation, requests_for
from deletion_service.protocol.request import LedgerType, PendingDeleteLedgerInfo, Reason
from offloaders.interface import java_uuid


@dataclass(frozen=True)
class Departure:
    """One ledger (or some of its parts) that left every reference."""

    topic: str
    ledger_id: int
    requests: tuple[PendingDeleteLedgerInfo, ...]
    unrequestable: str | None = None  # why a departed part got no request


def carried(before: Reading, after: Reading) -> Reading:
    """``after``, with each topic it could not read (alone, or with its namespace) seen as ``before`` saw it."""
    if not after.unreadable and not after.unreadable_namespaces:
        return after
    topics = dict(after.topics)
    for topic, seen in before.topics.items():
        if not after.knows(topic):
            topics[topic] = seen
    return Reading(topics, after.unreadable, after.unreadable_namespaces)


def departures(before: Reading, after: Reading, marked_at_ms: int,
               offload_fallback: OffloadLocation | None = None) -> list[Departure]:
    """Every departure from ``before`` to ``after`` (``after`` as :func:`carried` makes it), each
    request once.

    Only a topic whose sightings changed can lose a reference: one that ``after`` holds as the very
    sightings ``before`` held (reused, its nodes unchanged) is passed over.  What a changed topic
    no longer references departs unless some topic references it now, which one look at every
    topic tells for those few ids at once."""
    now = carried(before, after)
    changed = [(seen, now.topics.get(topic)) for topic, seen in before.topics.items()
               if now.topics.get(topic) is not seen]
    left: set[int] = set()
    parts_left: set[tuple[int, str]] = set()
    for seen, current in changed:
        left |= seen.ledger_ids() - current.ledger_ids() if current is not None else seen.ledger_ids()
        parts_left |= seen.parts - current.parts if current is not None else seen.parts
    kept, parts_kept = now.referenced_among(left, parts_left)
    gone, parts_gone = left - kept, parts_left - parts_kept
    out: list[Departure] = []
    sent: set[tuple[int, str]] = set()
    for seen, _ in changed:
        for departure in (*_listed(seen, gone, parts_gone, marked_at_ms, offload_fallback),
                          *_owned(seen, gone, marked_at_ms)):
            fresh = tuple(r for r in departure.requests if copy_key(r) not in sent)
            sent.update(copy_key(r) for r in fresh)
            if fresh or departure.unrequestable:
                out.append(Departure(departure.topic, departure.ledger_id, fresh, departure.unrequestable))
    return out


def part_of(request: PendingDeleteLedgerInfo) -> tuple[int, str] | None:
    """The (ledger id, uuid) an ``OFFLOAD_LEDGER`` request names (None for a BookKeeper request)."""
    ctx = request.offload_context
    if ctx is None:
        return None
    if ctx.uid_msb or ctx.uid_lsb:
        return request.ledger_id, java_uuid(ctx.uid_msb, ctx.uid_lsb)
    seg = ctx.segments[0]
    return request.ledger_id, java_uuid(seg.uid_msb, seg.uid_lsb)


def _listed(seen: TopicSightings, gone: set[int], parts_gone: set[tuple[int, str]], marked_at_ms: int,
            offload_fallback: OffloadLocation | None) -> list[Departure]:
    out = []
    parts_left = {p for p in seen.parts if p in parts_gone}  # most topics name no part: mostly empty
    for ledger_id in seen.listed:
        ledger_gone = ledger_id in gone
        its_parts_gone = {p for p in parts_left if p[0] == ledger_id} if parts_left else parts_left
        if not ledger_gone and not its_parts_gone:
            continue
        try:
            announced = requests_for(seen.topic, seen.listed[ledger_id], marked_at_ms, offload_fallback,
                                     reason=Reason.LEAKED)
        except ValueError as e:  # no valid request names it (a name or location the model refuses)
            out.append(Departure(seen.topic, ledger_id, (), unrequestable(e)))
            continue
        wanted = tuple(r for r in announced.requests
                       if (ledger_gone if r.ledger_type == LedgerType.LEDGER else part_of(r) in its_parts_gone))
        out.append(Departure(seen.topic, ledger_id, wanted, announced.keep_because))
    return out


def _owned(seen: TopicSightings, gone: set[int], marked_at_ms: int) -> list[Departure]:
    out = []
    for owned in seen.owned:
        if owned.ledger_id in gone:
            try:
                out.append(Departure(seen.topic, owned.ledger_id, (_request(seen.topic, owned, marked_at_ms),)))
            except ValueError as e:
                out.append(Departure(seen.topic, owned.ledger_id, (), unrequestable(e)))
    return out


def unrequestable(e: ValueError) -> str:
    """Why a departure got no request: a name, cursor or location no valid request can carry (a tenant's
    topic named with a control character, an over-long subscription, an offload policy's region in
    capitals).  One departure's, never the pass's: the other departures are requested as ever."""
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return f"no valid request can name it ({first[:200]}): the scan reports it"


def _request(topic: str, owned: OwnedLedger, marked_at_ms: int) -> PendingDeleteLedgerInfo:
    return PendingDeleteLedgerInfo(topic_name=topic, ledger_component=owned.component, cursor_name=owned.cursor,
                                   schema_id=owned.schema_id, ledger_type=LedgerType.LEDGER,
                                   ledger_id=owned.ledger_id, marked_at=marked_at_ms, reason=Reason.LEAKED)


def copy_key(request: PendingDeleteLedgerInfo) -> tuple[int, str]:
    """Which copy a request deletes: (ledger id, "") for BookKeeper, (ledger id, uuid) for an offloaded part."""
    return part_of(request) or (request.ledger_id, "")
