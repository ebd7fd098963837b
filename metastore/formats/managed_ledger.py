"""ManagedLedgerInfo: the managed-ledger node, as dataclasses.

The node lists every ledger of a topic (and where offloaded ones went), so it is
the source of truth for "is this ledger still in use".  We rewrite it in the
mark phase, hence three fidelity rules:

* optional fields keep their presence (``None`` = absent): Pulsar tests
  ``hasUidMsb()`` and friends, so an absent field must stay absent;
* fields our ``.proto`` does not know ride along in ``unknown`` (opaque bytes);
* the compression the node was read with is kept in ``compression``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .compression import CompressionType
from .compression import decode as unwrap
from .compression import encode as wrap
from .generated import managed_ledger_pb2 as pb
from .position import Position
from .protobuf_codec import merge_unknown, opt, parse, serialize, set_opt, unknown_bytes

_WHAT = "managed-ledger node"


@dataclass
class OffloadSegment:
    """One streaming-offload segment (objects ``<uuid>`` and ``<uuid>-index``)."""

    uid_msb: int | None = None
    uid_lsb: int | None = None
    complete: bool | None = None
    assigned_timestamp: int | None = None
    offloaded_timestamp: int | None = None
    end_entry_id: int | None = None
    driver_name: str | None = None  # None: no driverMetadata at all
    driver_metadata: dict[str, str] = field(default_factory=dict)


@dataclass
class OffloadContext:
    """Where and whether a ledger was offloaded to tiered storage."""

    uid_msb: int | None = None
    uid_lsb: int | None = None
    complete: bool | None = None
    bookkeeper_deleted: bool | None = None
    timestamp: int | None = None
    driver_name: str | None = None  # None: no driverMetadata at all
    driver_metadata: dict[str, str] = field(default_factory=dict)
    segments: list[OffloadSegment] = field(default_factory=list)
    unknown: bytes = b""


@dataclass
class LedgerInfo:
    """One ledger of the managed ledger; ``None`` fields are absent in the node."""

    ledger_id: int
    entries: int | None = None
    size: int | None = None
    timestamp: int | None = None
    offload_context: OffloadContext | None = None
    unknown: bytes = b""


@dataclass
class ManagedLedgerInfo:
    """The whole node: ledgers oldest first, properties, terminated position."""

    ledgers: list[LedgerInfo] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)
    terminated_position: Position | None = None
    compression: CompressionType = CompressionType.NONE
    unknown: bytes = b""

    def ledger_ids(self) -> list[int]:
        """The ledger ids in node order."""
        return [ledger.ledger_id for ledger in self.ledgers]


def _segment_from_pb(msg: pb.OffloadSegment) -> OffloadSegment:
    has_driver = msg.HasField("driverMetadata")
    return OffloadSegment(
        uid_msb=opt(msg, "uidMsb"),
        uid_lsb=opt(msg, "uidLsb"),
        complete=opt(msg, "complete"),
        assigned_timestamp=opt(msg, "assignedTimestamp"),
        offloaded_timestamp=opt(msg, "offloadedTimestamp"),
        end_entry_id=opt(msg, "endEntryId"),
        driver_name=msg.driverMetadata.name if has_driver else None,
        driver_metadata={kv.key: kv.value for kv in msg.driverMetadata.properties},
    )


def _context_from_pb(msg: pb.OffloadContext) -> OffloadContext:
    has_driver = msg.HasField("driverMetadata")
    return OffloadContext(
        uid_msb=opt(msg, "uidMsb"),
        uid_lsb=opt(msg, "uidLsb"),
        complete=opt(msg, "complete"),
        bookkeeper_deleted=opt(msg, "bookkeeperDeleted"),
        timestamp=opt(msg, "timestamp"),
        driver_name=msg.driverMetadata.name if has_driver else None,
        driver_metadata={kv.key: kv.value for kv in msg.driverMetadata.properties},
        segments=[_segment_from_pb(s) for s in msg.offloadSegment],
        unknown=unknown_bytes(msg),
    )


def _fill_driver(target: pb.OffloadDriverMetadata, name: str | None, props: dict[str, str]) -> None:
    target.name = name if name is not None else ""
    for key, value in props.items():
        target.properties.add(key=key, value=value)


def _segment_to_pb(seg: OffloadSegment, msg: pb.OffloadSegment) -> None:
    set_opt(msg, "uidMsb", seg.uid_msb)
    set_opt(msg, "uidLsb", seg.uid_lsb)
    set_opt(msg, "complete", seg.complete)
    set_opt(msg, "assignedTimestamp", seg.assigned_timestamp)
    set_opt(msg, "offloadedTimestamp", seg.offloaded_timestamp)
    set_opt(msg, "endEntryId", seg.end_entry_id)
    if seg.driver_name is not None or seg.driver_metadata:
        _fill_driver(msg.driverMetadata, seg.driver_name, seg.driver_metadata)


def _context_to_pb(ctx: OffloadContext, msg: pb.OffloadContext) -> None:
    set_opt(msg, "uidMsb", ctx.uid_msb)
    set_opt(msg, "uidLsb", ctx.uid_lsb)
    set_opt(msg, "complete", ctx.complete)
    set_opt(msg, "bookkeeperDeleted", ctx.bookkeeper_deleted)
    set_opt(msg, "timestamp", ctx.timestamp)
    if ctx.driver_name is not None or ctx.driver_metadata:
        _fill_driver(msg.driverMetadata, ctx.driver_name, ctx.driver_metadata)
    for seg in ctx.segments:
        _segment_to_pb(seg, msg.offloadSegment.add())
    merge_unknown(msg, ctx.unknown)


def _ledger_from_pb(li: pb.ManagedLedgerInfo.LedgerInfo) -> LedgerInfo:
    return LedgerInfo(
        ledger_id=li.ledgerId,
        entries=opt(li, "entries"),
        size=opt(li, "size"),
        timestamp=opt(li, "timestamp"),
        offload_context=_context_from_pb(li.offloadContext) if li.HasField("offloadContext") else None,
        unknown=unknown_bytes(li),
    )


def _ledger_to_pb(ledger: LedgerInfo, li: pb.ManagedLedgerInfo.LedgerInfo) -> None:
    li.ledgerId = ledger.ledger_id
    set_opt(li, "entries", ledger.entries)
    set_opt(li, "size", ledger.size)
    set_opt(li, "timestamp", ledger.timestamp)
    if ledger.offload_context is not None:
        _context_to_pb(ledger.offload_context, li.offloadContext)
        li.offloadContext.SetInParent()  # an empty context is still "present"
    merge_unknown(li, ledger.unknown)


def decode_ledger_info(payload: bytes) -> LedgerInfo:
    """One bare ``LedgerInfo`` message, as a streaming-offload index stores per ledger."""
    return _ledger_from_pb(parse(pb.ManagedLedgerInfo.LedgerInfo, payload, "LedgerInfo"))


def encode_ledger_info(ledger: LedgerInfo) -> bytes:
    msg = pb.ManagedLedgerInfo.LedgerInfo()
    _ledger_to_pb(ledger, msg)
    return serialize(msg, "LedgerInfo")


def managed_ledger_from_proto(payload: bytes) -> ManagedLedgerInfo:
    """Decode the plain protobuf (no compression envelope)."""
    msg = parse(pb.ManagedLedgerInfo, payload, _WHAT)
    ledgers = [_ledger_from_pb(li) for li in msg.ledgerInfo]
    terminated = None
    if msg.HasField("terminatedPosition"):
        terminated = Position(msg.terminatedPosition.ledgerId, msg.terminatedPosition.entryId)
    return ManagedLedgerInfo(
        ledgers=ledgers,
        properties={kv.key: kv.value for kv in msg.properties},
        terminated_position=terminated,
        unknown=unknown_bytes(msg),
    )


def references_from_proto(payload: bytes) -> ManagedLedgerInfo:
    """Decode the plain protobuf as far as references go (see :func:`decode_managed_ledger_references`)."""
    msg = parse(pb.ManagedLedgerInfo, payload, _WHAT)
    ledgers = [LedgerInfo(li.ledgerId, offload_context=_context_from_pb(li.offloadContext))
               if li.HasField("offloadContext") else LedgerInfo(li.ledgerId) for li in msg.ledgerInfo]
    terminated = None
    if msg.HasField("terminatedPosition"):
        terminated = Position(msg.terminatedPosition.ledgerId, msg.terminatedPosition.entryId)
    return ManagedLedgerInfo(ledgers=ledgers, properties={kv.key: kv.value for kv in msg.properties},
                             terminated_position=terminated)


def managed_ledger_to_proto(info: ManagedLedgerInfo) -> bytes:
    """Encode as the plain protobuf (no compression envelope)."""
    msg = pb.ManagedLedgerInfo()
    for ledger in info.ledgers:
        _ledger_to_pb(ledger, msg.ledgerInfo.add())
    if info.terminated_position is not None:
        ledger_id, entry_id = info.terminated_position
        msg.terminatedPosition.ledgerId = ledger_id
        msg.terminatedPosition.entryId = entry_id
    for key, value in info.properties.items():
        msg.properties.add(key=key, value=value)
    merge_unknown(msg, info.unknown)
    return serialize(msg, _WHAT)


def decode_managed_ledger(data: bytes) -> ManagedLedgerInfo:
    """Decode a managed-ledger node as stored (with or without the 0x4778 envelope)."""
    payload, compression = unwrap(data, "managed-ledger")
    info = managed_ledger_from_proto(payload)
    info.compression = compression
    return info


def decode_managed_ledger_references(data: bytes) -> ManagedLedgerInfo:
    """A managed-ledger node as far as what it references goes: each ledger's id and its offload
    context, in list order, the properties and the terminated position; each ledger's entries,
    size and timestamp and every unknown field are left out.  Never to be written back (the rules
    above need the whole node).  For readers of a whole cluster's references (the orphan scan, the
    leak watcher): a plain ledger costs its id, not a field-by-field decode."""
    payload, compression = unwrap(data, "managed-ledger")
    info = references_from_proto(payload)
    info.compression = compression
    return info


def encode_managed_ledger(info: ManagedLedgerInfo) -> bytes:
    """Encode for storage, compressed the way ``info.compression`` says."""
    return wrap(managed_ledger_to_proto(info), info.compression, "managed-ledger")
