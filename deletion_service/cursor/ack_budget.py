"""The ack-state persist budget: what of a cursor's state goes into its node, in priority order.

Why a budget: a cursor whose state no longer fits would be persisted with its
ranges silently cut (upstream #25540, #25985), and a restart would redeliver
what the cut dropped with nobody told.  Here the budget
``managedLedgerMaxAckStateInBytesToPersist`` is applied in this order:

1. the subscription properties (``cursorProperties``, where delayed-delivery buckets are
   referenced), and the ``properties`` that reference a ledger (``CompactedTopicLedger``), always:
   dropping one would make a live ledger look unreferenced to the delete phase and the scan;
2. the other ``properties`` (the producers' last sequence ids of the dedup cursor), as many as fit;
3. the individually acked ranges and batch-index entries, nearest the
   mark-delete position first, as a prefix: everything acked before the first
   item left out is kept, everything after it is left out.

Why a prefix and never "skip the big one, keep later small ones": what is
left out is redelivered after a restart, and a prefix makes that a single
contiguous stretch an operator can reason about.  Dropping acks is always
safe for deletion: a cursor that looks further behind only keeps more ledgers.

The budget is also capped at what the metadata store takes in one request
(ZooKeeper's ``jute.maxbuffer``), because a bigger node makes ZooKeeper drop
the connection.  Sizes are of the uncompressed protobuf, so a compressed node
is always well under it.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from pyroaring import BitMap

from deletion_service.protocol.references import COMPACTED_LEDGER_PROPERTY
from metastore.formats import BatchDeletionIndex, ManagedCursorInfo, MessageRange, Position
from metastore.formats.cursor_info import cursor_to_proto

from . import ack_size
from .acks import AckState

log = logging.getLogger(__name__)

MIN_BYTES = 1024
MAX_BYTES = 5 * 1024 * 1024
#: Room kept for the path and the request framing when capping at a store's request limit.
_REQUEST_HEADROOM = 1024


@dataclass(frozen=True)
class PersistBudget:
    """How much of a cursor's state may be persisted, and what happens when it does not fit."""

    max_bytes: int = MAX_BYTES
    #: ``managedLedgerMaxUnackedRangesToPersist``; ignored when a byte limit was configured.
    max_ranges: int | None = None
    #: ``dispatcherPauseOnAckPersistentStateEnabled``: stop dispatching while the state does not fit.
    pause_dispatch: bool = True

    def capped(self, max_request_bytes: int) -> PersistBudget:
        """Never above what the metadata store takes in one request."""
        return dataclasses.replace(self, max_bytes=min(self.max_bytes, max_request_bytes - _REQUEST_HEADROOM))

    @classmethod
    def from_config(cls, config: object) -> PersistBudget:
        """The budget a :class:`~deletion_service.config.ServiceConfig` asks for.

        The two limits are exclusive: when the byte limit is set, the range count is ignored.
        """
        explicit = getattr(config, "model_fields_set", set())
        count = getattr(config, "managed_ledger_max_unacked_ranges_to_persist", None)
        if "managed_ledger_max_ack_state_in_bytes_to_persist" in explicit:
            count = None
        return cls(max_bytes=config.managed_ledger_max_ack_state_in_bytes_to_persist,  # type: ignore[attr-defined]
                   max_ranges=count,
                   pause_dispatch=config.dispatcher_pause_on_ack_persistent_state_enabled)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Head:
    """The part of an ack state that fits: a prefix in position order."""

    ranges: list[MessageRange]
    batch: list[BatchDeletionIndex]
    size: int
    dropped_ranges: int
    dropped_batch: int


@dataclass(frozen=True)
class PersistPlan:
    """The node content to write, and what the whole state would have taken."""

    info: ManagedCursorInfo
    full_size: int  # the whole cursor metadata: ``pulsar_cursor_metadata_size_in_memory_bytes``
    persisted_size: int
    budget: int
    kept_ranges: int
    dropped_ranges: int
    dropped_batch: int
    dropped_properties: int

    @property
    def complete(self) -> bool:
        return not (self.dropped_ranges or self.dropped_batch or self.dropped_properties)


def _encoded(info: ManagedCursorInfo) -> int:
    return len(cursor_to_proto(info))


def _property_size(name: str, value: int) -> int:
    return _encoded(ManagedCursorInfo(-1, properties={name: value})) - _encoded(ManagedCursorInfo(-1))


BatchEntries = dict[int, list[tuple[Position, BitMap]]]


def _chunks(acks: AckState, batch_by_ledger: BatchEntries) -> list[tuple[tuple[int, int], object]]:
    """The state in position order: cross-ledger spans by their lower end, then one chunk per ledger."""
    chunks: list[tuple[tuple[int, int], object]] = [((s.lower.ledger_id, s.lower.entry_id), s) for s in acks.spans]
    chunks += [((lid, -2), lid) for lid in sorted(set(acks.ledger_ids()) | set(batch_by_ledger))]
    return sorted(chunks, key=lambda c: c[0])


def _ledger_items(acks: AckState, ledger_id: int,
                  entries: list[tuple[Position, BitMap]]) -> Iterator[tuple[object, int]]:
    """One ledger's ranges and batch entries in position order, each with its size (lazily: a
    budget that fits forty thousand ranges of a million builds forty thousand)."""
    ranges = (((r.lower.entry_id, 0), r, ack_size.message_range(r)) for r in acks.ledger_ranges(ledger_id))
    batch = [((p.entry_id, 1), BatchDeletionIndex(p, list(u)), ack_size.batch_entry(p, u)) for p, u in entries]
    for _, item, size in heapq.merge(ranges, batch, key=lambda i: i[0]):
        yield item, size


def _items(acks: AckState, batch_by_ledger: BatchEntries) -> Iterator[tuple[object, int]]:
    """Every range and batch-index entry in position order, each with its size."""
    for _, chunk in _chunks(acks, batch_by_ledger):
        if isinstance(chunk, MessageRange):
            yield chunk, ack_size.message_range(chunk)
        else:
            yield from _ledger_items(acks, chunk, batch_by_ledger.get(chunk, []))  # type: ignore[arg-type]


def head(acks: AckState, max_bytes: int, max_ranges: int | None = None) -> Head:
    """The longest prefix of ``acks`` within ``max_bytes`` (and ``max_ranges`` ranges)."""
    entries = acks.batch_entries()  # sorted: each ledger's list stays in position order
    batch_by_ledger: BatchEntries = defaultdict(list)
    for position, unacked in entries:
        batch_by_ledger[position.ledger_id].append((position, unacked))
    ranges: list[MessageRange] = []
    batch: list[BatchDeletionIndex] = []
    size = 0
    for item, item_size in _items(acks, batch_by_ledger):
        is_range = isinstance(item, MessageRange)
        if size + item_size > max_bytes or (is_range and max_ranges is not None and len(ranges) >= max_ranges):
            break
        (ranges if is_range else batch).append(item)  # type: ignore[arg-type]
        size += item_size
    return Head(ranges, batch, size, len(acks) - len(ranges), len(entries) - len(batch))


#: ``properties`` that reference a ledger: never left out, whatever the budget.
REFERENCING_PROPERTIES = frozenset({COMPACTED_LEDGER_PROPERTY})


def plan_persist(info: ManagedCursorInfo, acks: AckState, budget: PersistBudget) -> PersistPlan:
    """What to write for a cursor whose node is ``info`` (our positions) and whose acks are ``acks``."""
    kept = {name: value for name, value in info.properties.items() if name in REFERENCING_PROPERTIES}
    base = dataclasses.replace(info, individual_deleted_messages=[], batched_entry_deletion_index_info=[],
                               properties=kept)
    # positions, subscription properties, references, what we do not model: always kept
    base_size = size = _encoded(base)
    property_sizes = {name: _property_size(name, value) for name, value in info.properties.items()}
    properties: dict[str, int] = dict(kept)
    for name, value in info.properties.items():
        if name in kept:
            continue
        if size + property_sizes[name] > budget.max_bytes:
            break
        properties[name] = value
        size += property_sizes[name]
    taken = head(acks, max(budget.max_bytes - size, 0), budget.max_ranges)
    full_size = base_size + sum(size for name, size in property_sizes.items() if name not in kept) + acks.encoded_size()
    persisted = dataclasses.replace(base, properties=properties, individual_deleted_messages=taken.ranges,
                                    batched_entry_deletion_index_info=taken.batch)
    return PersistPlan(persisted, full_size, size + taken.size, budget.max_bytes, len(taken.ranges),
                       taken.dropped_ranges, taken.dropped_batch, len(info.properties) - len(properties))


def warn_if_incomplete(plan: PersistPlan, cursor: str) -> None:
    """Never drop anything silently: one WARN per persist that left something out, with counts."""
    if plan.complete:
        return
    log.warning(
        "cursor %s: its state takes %d bytes, over the %d-byte persist budget "
        "(managedLedgerMaxAckStateInBytesToPersist); persisted %d bytes: %d acked ranges nearest the "
        "mark-delete position, leaving out %d ranges, %d batch-index entries and %d producer sequence ids; "
        "a restart redelivers the messages they acknowledged",
        cursor, plan.full_size, plan.budget, plan.persisted_size, plan.kept_ranges, plan.dropped_ranges,
        plan.dropped_batch, plan.dropped_properties)
