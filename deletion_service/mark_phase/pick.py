"""Which ledgers a trim may remove, and the requests that announce them. Pure.

A ledger goes only when every cursor has consumed all of it: wholly below the
slowest cursor's mark-delete position, and never the current (last) ledger,
which a broker may still be writing.  A topic without cursors keeps
everything: without a cursor nothing proves the data was consumed (retention
rules live in the broker, not here).

A picked ledger leaves the list only when every copy it has — BookKeeper, and
each offloaded part at the location it was written to — gets a request: the list is the last record of where an
offloaded copy lives, so a copy we cannot name keeps its ledger listed
(``Announcement.keep_because`` says why, for the operator).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from deletion_service.protocol.request import (
    LedgerComponent,
    LedgerType,
    OffloadContextRef,
    PendingDeleteLedgerInfo,
    Reason,
)
from metastore.formats import LedgerInfo, ManagedCursorInfo, ManagedLedgerInfo, OffloadContext, Position
from offloaders.allow_list import FILESYSTEM_DRIVERS, normalize_driver


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


@dataclass(frozen=True)
class OffloadLocation:
    """Where offloaded objects live: a driver name and its metadata (``bucket``, ``region``,
    ``serviceEndpoint``), as an OFFLOAD_LEDGER request carries them.

    As ``offload_fallback``: the cluster's ``managedLedgerOffload*`` settings, for ledgers
    offloaded by older brokers whose offload context has no driver metadata.  Pulsar itself
    deletes those through the offloader the broker is configured with (``OffloadUtils``
    falls back to the offloader's own driver metadata), so the cluster's settings are the
    truth for them.  Built by the caller (the CLI) from its config; trim never reads config."""

    driver: str
    metadata: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, driver: str | None, bucket: str | None = None, region: str | None = None,
                      service_endpoint: str | None = None) -> OffloadLocation | None:
        """None when no driver is set: then a driverless offload keeps its ledger listed."""
        if not driver or not driver.strip():
            return None
        keys = {"bucket": bucket, "region": region, "serviceEndpoint": service_endpoint}
        return cls(driver.strip(), {k: v for k, v in keys.items() if v})

    def under(self, own: Mapping[str, str]) -> OffloadLocation:
        """This target with the keys a driverless context does carry on top: they are the more
        specific record of where its objects went."""
        return OffloadLocation(self.driver, {**self.metadata, **own})

    @property
    def locatable(self) -> bool:
        """An S3-family target without a bucket would be refused by the delete phase, which
        would leave the objects orphaned once the ledger left the list; the filesystem driver
        needs no bucket (its root is the daemon's configured base directory)."""
        return normalize_driver(self.driver) in FILESYSTEM_DRIVERS or bool(self.metadata.get("bucket"))


@dataclass(frozen=True)
class Announcement:
    """What trim sends for one picked ledger: one request per copy it has, or — when a copy
    cannot be named — no request and why the ledger must stay listed."""

    requests: list[PendingDeleteLedgerInfo]
    keep_because: str | None = None


def requests_for(topic: str, ledger: LedgerInfo, marked_at_ms: int,
                 offload_fallback: OffloadLocation | None = None, reason: Reason = Reason.TRIM) -> Announcement:
    """One request per copy: BookKeeper unless the offload deleted it, and one OFFLOAD_LEDGER request
    per offloaded part (the per-ledger objects; each streaming segment), each naming the location
    that part was written to.  A ledger leaves the list only when EVERY copy it has got a request,
    so a part we cannot name or locate (no uuid; no driver and no ``offload_fallback``; a location
    without a bucket) keeps the whole ledger listed: sending the other requests alone and forgetting
    the ledger would orphan that part's objects.

    Why one request per part:

    * a segment records its own location (``OffloadSegment.driverMetadata``; a segment written
      after the offload settings changed lives elsewhere than its context says).  Its request's
      context-level location *is* the segment's, so every reader — an older daemon that ignores
      the per-segment fields too — looks for it where it was written, never "absent" elsewhere;
    * a streaming segment may hold several ledgers.  The delete phase deletes it only once no
      ledger its managed ledger still lists holds it, and acks a request for a segment still held
      as in use: the holder's own request deletes it when the holder leaves.  In one request with
      the ledger's other parts, a held segment would keep them all (and they might have no
      other request left to delete them).

    ``reason``: trim's own, or the leak watcher's (which builds the requests of a ledger a broker
    removed from its list as trim would have built them)."""
    base = {"topic_name": topic, "ledger_component": LedgerComponent.MANAGED_LEDGER, "ledger_id": ledger.ledger_id,
            "marked_at": marked_at_ms, "reason": reason}
    ctx = ledger.offload_context
    bookkeeper = PendingDeleteLedgerInfo(**base, ledger_type=LedgerType.LEDGER)
    if ctx is None:
        return Announcement([bookkeeper])
    out = [] if ctx.bookkeeper_deleted else [bookkeeper]
    if not _names_offloaded_objects(ctx):
        if ctx.bookkeeper_deleted or ctx.complete:
            state = "its BookKeeper copy was deleted after offload" if ctx.bookkeeper_deleted else (
                "its offload is marked complete")
            return Announcement([], f"{state}, but its offload context names no offloaded objects (no uuid, no "
                                    "segments): the offloaded copy cannot be deleted, so the ledger stays listed")
        return Announcement(out)  # an offload context that never got going: BookKeeper is the only copy
    nameless = [i for i, s in enumerate(ctx.segments) if not _is_uuid(s.uid_msb, s.uid_lsb)]
    if nameless:
        return Announcement([], f"offload segment(s) {', '.join(map(str, nameless))} have no uuid: their objects "
                                "cannot be named, so the ledger stays listed")
    parts: list[tuple[OffloadLocation, dict]] = []
    needs_context = _is_uuid(ctx.uid_msb, ctx.uid_lsb) or any(not s.driver_name for s in ctx.segments)
    context_location = _context_location(ctx, offload_fallback) if needs_context else None
    if isinstance(context_location, str):
        return Announcement([], context_location)
    if _is_uuid(ctx.uid_msb, ctx.uid_lsb):
        assert context_location is not None
        parts.append((context_location, {"uidMsb": ctx.uid_msb or 0, "uidLsb": ctx.uid_lsb or 0, "segments": []}))
    for i, seg in enumerate(ctx.segments):
        if seg.driver_name:
            where = OffloadLocation(seg.driver_name, dict(seg.driver_metadata))
            if not where.locatable:
                return Announcement([], f"offload segment {i} records driver {seg.driver_name!r} without a bucket: "
                                        "its objects cannot be located, so the ledger stays listed")
            own = {"driverName": where.driver, "driverMetadata": dict(where.metadata)}
        else:
            assert context_location is not None
            where, own = context_location, {}
        parts.append((where, {"uidMsb": 0, "uidLsb": 0,
                              "segments": [{"uidMsb": seg.uid_msb or 0, "uidLsb": seg.uid_lsb or 0, **own}]}))
    for where, ref in parts:
        context = OffloadContextRef.model_validate({
            "uidMsb": ref["uidMsb"], "uidLsb": ref["uidLsb"], "driverName": where.driver,
            "driverMetadata": dict(where.metadata), "segments": ref["segments"]})
        out.append(PendingDeleteLedgerInfo(**base, ledger_type=LedgerType.OFFLOAD_LEDGER, offload_context=context))
    return Announcement(out)


def _context_location(ctx: OffloadContext, offload_fallback: OffloadLocation | None) -> OffloadLocation | str:
    """Where the context's own objects are (and its segments without a location of their own);
    or, as a string, why that cannot be told."""
    if ctx.driver_name:
        return OffloadLocation(ctx.driver_name, dict(ctx.driver_metadata))
    if offload_fallback is None:
        return ("it was offloaded but its offload context names no driver (an older broker's offload) and "
                "managedLedgerOffloadDriver is not set; set it (with managedLedgerOffloadBucket/Region/"
                "ServiceEndpoint) to the cluster's offload settings, or the offloaded copy would be orphaned")
    target = offload_fallback.under(ctx.driver_metadata)
    if not target.locatable:
        return (f"its offload context names no driver and the fallback managedLedgerOffloadDriver "
                f"{target.driver!r} has no managedLedgerOffloadBucket: the offloaded copy cannot be located")
    return target


def _is_uuid(msb: int | None, lsb: int | None) -> bool:
    """A random (version 4) UUID never has both halves zero; (0, 0) is protobuf's 'unset'."""
    return bool(msb) or bool(lsb)


def _names_offloaded_objects(ctx: OffloadContext) -> bool:
    return _is_uuid(ctx.uid_msb, ctx.uid_lsb) or bool(ctx.segments)


def without(ml: ManagedLedgerInfo, removed: set[int]) -> ManagedLedgerInfo:
    """The node to write back: same properties, compression and unknown fields, fewer ledgers."""
    return replace(ml, ledgers=[lg for lg in ml.ledgers if lg.ledger_id not in removed])
