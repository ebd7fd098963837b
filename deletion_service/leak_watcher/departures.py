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
    topics = dict(after.topics)
    for topic, seen in before.topics.items():
        if not after.knows(topic):
            topics[topic] = seen
    return Reading(topics, after.unreadable, after.unreadable_namespaces)


def departures(before: Reading, after: Reading, marked_at_ms: int,
               offload_fallback: OffloadLocation | None = None) -> list[Departure]:
    """Every departure from ``before`` to ``after`` (``after`` as :func:`carried` makes it), each
    request once."""
    ledgers_now, parts_now = carried(before, after).referenced()
    out: list[Departure] = []
    sent: set[tuple[int, str]] = set()
    for seen in before.topics.values():
        for departure in (*_listed(seen, ledgers_now, parts_now, marked_at_ms, offload_fallback),
                          *_owned(seen, ledgers_now, marked_at_ms)):
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


def _listed(seen: TopicSightings, ledgers_now: set[int], parts_now: set[tuple[int, str]], marked_at_ms: int,
            offload_fallback: OffloadLocation | None) -> list[Departure]:
    out = []
    for ledger_id, info in seen.listed.items():
        gone = ledger_id not in ledgers_now
        parts_gone = {p for p in seen.parts if p[0] == ledger_id and p not in parts_now}
        if not gone and not parts_gone:
            continue
        announced = requests_for(seen.topic, info, marked_at_ms, offload_fallback, reason=Reason.LEAKED)
        wanted = tuple(r for r in announced.requests
                       if (gone if r.ledger_type == LedgerType.LEDGER else part_of(r) in parts_gone))
        out.append(Departure(seen.topic, ledger_id, wanted, announced.keep_because))
    return out


def _owned(seen: TopicSightings, ledgers_now: set[int], marked_at_ms: int) -> list[Departure]:
    return [Departure(seen.topic, owned.ledger_id, (_request(seen.topic, owned, marked_at_ms),))
            for owned in seen.owned if owned.ledger_id not in ledgers_now]


def _request(topic: str, owned: OwnedLedger, marked_at_ms: int) -> PendingDeleteLedgerInfo:
    return PendingDeleteLedgerInfo(topic_name=topic, ledger_component=owned.component, cursor_name=owned.cursor,
                                   schema_id=owned.schema_id, ledger_type=LedgerType.LEDGER,
                                   ledger_id=owned.ledger_id, marked_at=marked_at_ms, reason=Reason.LEAKED)


def copy_key(request: PendingDeleteLedgerInfo) -> tuple[int, str]:
    """Which copy a request deletes: (ledger id, "") for BookKeeper, (ledger id, uuid) for an offloaded part."""
    return part_of(request) or (request.ledger_id, "")
