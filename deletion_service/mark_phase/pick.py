"""Which ledgers a trim may remove, and the requests that announce them. Pure.

A ledger goes only when every cursor has consumed all of it: wholly below the
slowest cursor's mark-delete position, and never the current (last) ledger,
which a broker may still be writing.  A topic without cursors keeps
everything: without a cursor nothing proves the data was consumed (retention
rules live in the broker, not here).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from deletion_service.model import LedgerComponent, LedgerType, PendingDeleteLedgerInfo, Reason
from metastore.formats import LedgerInfo, ManagedCursorInfo, ManagedLedgerInfo, OffloadContext, Position


@dataclass(frozen=True)
class Picked:
    ledgers: list[LedgerInfo]
    why_none: str | None = None  # when nothing was picked, the reason (for the operator)


def slowest(cursors: Mapping[str, ManagedCursorInfo]) -> Position | None:
    positions = [c.mark_delete for c in cursors.values()]
    if not positions or any(p is None for p in positions):
        return None
    return min(positions)  # type: ignore[type-var]


def pick(ml: ManagedLedgerInfo, cursors: Mapping[str, ManagedCursorInfo]) -> Picked:
    if not cursors:
        return Picked([], "the topic has no cursors: nothing proves its data was consumed")
    low = slowest(cursors)
    if low is None:
        return Picked([], "a cursor has no mark-delete position")
    picked = [lg for lg in ml.ledgers[:-1] if _wholly_below(lg, low)]
    if not picked:
        return Picked([], f"no ledger lies wholly below the slowest cursor ({low.ledger_id}:{low.entry_id})")
    return Picked(picked)


def _wholly_below(ledger: LedgerInfo, mark_delete: Position) -> bool:
    if ledger.ledger_id < mark_delete.ledger_id:
        return True
    return (ledger.ledger_id == mark_delete.ledger_id and ledger.entries is not None
            and mark_delete.entry_id >= ledger.entries - 1)


def requests_for(topic: str, ledger: LedgerInfo, marked_at_ms: int) -> list[PendingDeleteLedgerInfo]:
    """One request per (ledger, storage): an offloaded ledger still in BookKeeper yields both."""
    base = {"topic_name": topic, "ledger_component": LedgerComponent.MANAGED_LEDGER, "ledger_id": ledger.ledger_id,
            "marked_at": marked_at_ms, "reason": Reason.TRIM}
    ctx = ledger.offload_context
    out = []
    if ctx is None or not ctx.bookkeeper_deleted:
        out.append(PendingDeleteLedgerInfo(**base, ledger_type=LedgerType.LEDGER))
    if ctx is not None and _has_offload_target(ctx):
        out.append(PendingDeleteLedgerInfo(**base, ledger_type=LedgerType.OFFLOAD_LEDGER,
                                           offload_context=_offload_ref(ctx)))
    return out


def _has_offload_target(ctx: OffloadContext) -> bool:
    has_uuid = ctx.uid_msb is not None and ctx.uid_lsb is not None
    return bool(ctx.driver_name) and (has_uuid or bool(ctx.segments))


def _offload_ref(ctx: OffloadContext) -> dict:
    return {
        "uidMsb": ctx.uid_msb or 0, "uidLsb": ctx.uid_lsb or 0, "driverName": ctx.driver_name,
        "driverMetadata": dict(ctx.driver_metadata),
        "segments": [{"uidMsb": s.uid_msb or 0, "uidLsb": s.uid_lsb or 0} for s in ctx.segments],
    }


def without(ml: ManagedLedgerInfo, removed: set[int]) -> ManagedLedgerInfo:
    """The node to write back: same properties, compression and unknown fields, fewer ledgers."""
    return replace(ml, ledgers=[lg for lg in ml.ledgers if lg.ledger_id not in removed])
