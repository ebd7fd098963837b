"""What the delete phase needs from tiered storage, and nothing more.

A ledger offloaded by Pulsar lives in tiered storage as objects whose names are
derived from the ledger id and the offload context's UUID (``uidMsb``/``uidLsb``).
Deleting them safely takes four steps, each a method here:

1. refuse a target outside the operator's allow-list (``OffloadNotAllowedError``),
   checked by every public method, so no caller can forget it;
2. name the objects (:meth:`Offloader.object_names`);
3. read what the index objects say about whose data they hold
   (:meth:`Offloader.index_refs`, :meth:`Offloader.read_index`), because a wrong
   UUID in a message must never delete another ledger's data.  An offloader
   only reports :class:`IndexFacts`; whether they prove the objects belong to
   the request's ledger and topic is the delete phase's judgement
   (``deletion_service/delete_phase/rules/verify_offload.py``);
4. delete, where an object already gone counts as success (the delete phase is
   retried and must be idempotent).

The orphan scan needs one more thing, and it lives here for the same reason:
:meth:`Offloader.list_objects` lists what a :class:`StorageLocation` holds and
:meth:`Offloader.describe_object` reads an object's name back into (kind, uuid,
ledger id), so protocol code learns what is stored without knowing boto3 or a
driver's directory layout.

Errors are typed by what the caller should do next: retry
(``OffloadTransientError``), ack without deleting (``OffloadNotAllowedError``),
or send to the DLQ (``OffloadTargetError``).
"""

from __future__ import annotations

import abc
import re
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from offloaders.index_format import SegmentLedgerInfo, SourceLedgerMetadata

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


# --------------------------------------------------------------------------- errors


class OffloadError(Exception):
    """Base of every error raised by an offloader."""


class OffloadTransientError(OffloadError):
    """The storage did not answer usefully *this time* (5xx, throttling, timeout,
    connection refused).  The caller retries with backoff, then reconsumes later."""


class OffloadNotAllowedError(OffloadError):
    """The target (driver, bucket, endpoint or path) is outside the allow-list.
    The caller acks without deleting and counts ``metadata_mismatch``: the message
    may be forged or stale, and retrying cannot make it allowed."""


class OffloadTargetError(OffloadError):
    """A permanent problem with the target itself: bucket missing, access denied,
    no credentials, malformed driver metadata, unsupported layout.  Not retried in
    a loop; the caller sends the message to the DLQ where an operator can look.

    A missing bucket is deliberately *not* "absent = success": a typo in an
    endpoint or bucket would otherwise ack every deletion while leaving the data."""


# --------------------------------------------------------------------------- naming


def _check_int64(name: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{name} must be a signed 64-bit integer, got {value!r}")
    return value


def java_uuid(msb: int, lsb: int) -> str:
    """``new java.util.UUID(msb, lsb).toString()`` for signed int64 halves.

    Java stores the two halves as signed longs (that is what the protobuf
    ``OffloadContext`` carries); the text form is the two's-complement bit pattern
    in hex, which is what Python's ``uuid.UUID(int=...)`` prints once each half is
    made unsigned.
    """
    _check_int64("uidMsb", msb)
    _check_int64("uidLsb", lsb)
    return str(uuid.UUID(int=((msb & 0xFFFF_FFFF_FFFF_FFFF) << 64) | (lsb & 0xFFFF_FFFF_FFFF_FFFF)))


def ledger_data_name(uuid_text: str, ledger_id: int) -> str:
    """Upstream ``DataBlockUtils.dataBlockOffloadKey``: ``<uuid>-ledger-<ledgerId>``."""
    return f"{uuid_text}-ledger-{ledger_id}"


def ledger_index_name(uuid_text: str, ledger_id: int) -> str:
    """Upstream ``DataBlockUtils.indexBlockOffloadKey(ledgerId, uuid)``."""
    return f"{uuid_text}-ledger-{ledger_id}-index"


def segment_index_name(uuid_text: str) -> str:
    """Upstream ``DataBlockUtils.indexBlockOffloadKey(uuid)`` (streaming offload)."""
    return f"{uuid_text}-index"


class ObjectKind(StrEnum):
    """What an object's name says it is (the inverse of the naming functions above)."""

    DATA = "data"  # <uuid>-ledger-<id> (or a filesystem MapFile directory)
    INDEX = "index"  # <uuid>-ledger-<id>-index
    SEGMENT = "segment"  # <uuid>
    SEGMENT_INDEX = "segment-index"  # <uuid>-index
    OTHER = "other"  # not a name an offloader writes


@dataclass(frozen=True, slots=True)
class ObjectName:
    """An object's name read back: its kind, and the uuid and ledger id it names (None when it names none)."""

    kind: ObjectKind
    uuid: str | None = None
    ledger_id: int | None = None


#: ``java.util.UUID#toString``: lower-case hex, 8-4-4-4-12.
#: Storage calls the delete phase keeps in flight for one batch (verifying, then deleting, offloaded
#: copies): an object store answers each in milliseconds, so one at a time made S3 the whole batch.
#: Four, not more: each extra thread cost the daemon ~14 MB of RSS (measured: 103 MB at 1,
#: 154 MB at 4, 322 MB at 16; ``bench/e2e.py``), and the S3 server here answered no faster.
OFFLOAD_CONCURRENCY = 4

UUID_PATTERN = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
#: Ledger ids as ``%d`` writes them (no leading zeros), so a parsed name always names itself back.
_OBJECT_NAME = re.compile(rf"({UUID_PATTERN})(?:-ledger-(0|[1-9][0-9]{{0,18}}))?(-index)?")


def parse_object_name(name: str) -> ObjectName:
    """Inverse of :func:`ledger_data_name`, :func:`ledger_index_name`, :func:`segment_index_name`
    and a bare segment uuid; anything else (or a ledger id past int64) is :attr:`ObjectKind.OTHER`."""
    match = _OBJECT_NAME.fullmatch(name)
    if match is None:
        return ObjectName(ObjectKind.OTHER)
    uuid_text, ledger, index = match.groups()
    if ledger is None:
        return ObjectName(ObjectKind.SEGMENT_INDEX if index else ObjectKind.SEGMENT, uuid_text)
    ledger_id = int(ledger)
    if ledger_id > _INT64_MAX:
        return ObjectName(ObjectKind.OTHER)
    return ObjectName(ObjectKind.INDEX if index else ObjectKind.DATA, uuid_text, ledger_id)


# --------------------------------------------------------------------------- target


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """One streaming-offload segment (``OffloadContext.offloadSegment``).

    ``driver_name``/``driver_metadata``: the segment's own recorded location
    (``OffloadSegment.driverMetadata``), None when it lives where its context says."""

    uid_msb: int
    uid_lsb: int
    driver_name: str | None = None
    driver_metadata: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        _check_int64("segment uidMsb", self.uid_msb)
        _check_int64("segment uidLsb", self.uid_lsb)
        if self.driver_metadata is not None:
            object.__setattr__(self, "driver_metadata", dict(self.driver_metadata))

    @property
    def uuid(self) -> str:
        return java_uuid(self.uid_msb, self.uid_lsb)


@dataclass(frozen=True, slots=True)
class OffloadTarget:
    """Where one ledger's offloaded copy lives, as the message (or the managed
    ledger's ``OffloadContext``) describes it.

    ``managed_ledger_name`` (``tenant/ns/persistent/<encoded topic>``) is optional
    for the S3 family (used only to verify the index) but required by the
    filesystem driver, whose upstream layout puts it in the path.

    Each part of the copy is read, verified and deleted where it was written:
    the per-ledger objects at the context's location, each segment's at its own
    (:meth:`location_of`).  "Absent" is only ever concluded where the data went.
    """

    driver_name: str
    driver_metadata: Mapping[str, str]
    uid_msb: int
    uid_lsb: int
    ledger_id: int
    segments: tuple[SegmentRef, ...] = ()
    managed_ledger_name: str | None = None

    def __post_init__(self) -> None:
        _check_int64("uidMsb", self.uid_msb)
        _check_int64("uidLsb", self.uid_lsb)
        _check_int64("ledgerId", self.ledger_id)
        if self.ledger_id < 0:
            raise ValueError(f"ledgerId must not be negative, got {self.ledger_id}")
        object.__setattr__(self, "driver_metadata", dict(self.driver_metadata))
        object.__setattr__(self, "segments", tuple(self.segments))

    @property
    def uuid(self) -> str:
        return java_uuid(self.uid_msb, self.uid_lsb)

    @property
    def has_ledger_uuid(self) -> bool:
        """False for a streaming-only context whose per-ledger UUID was never set."""
        return not (self.segments and self.uid_msb == 0 and self.uid_lsb == 0)

    @property
    def own_location(self) -> StorageLocation:
        """The context's location: the per-ledger objects', and every segment's without its own."""
        return StorageLocation(self.driver_name, self.driver_metadata)

    def segment_location(self, segment: SegmentRef) -> StorageLocation:
        if segment.driver_name is None:
            return self.own_location
        return StorageLocation(segment.driver_name, segment.driver_metadata or {})

    def locations(self) -> list[StorageLocation]:
        """Every distinct location this target's objects are read from or deleted at (the
        allow-list judges each; a part the request does not name is not located)."""
        out = [self.own_location] if self.has_ledger_uuid else []
        out += [self.segment_location(seg) for seg in self.segments]
        return list(dict.fromkeys(out)) or [self.own_location]

    def location_of(self, name: str) -> StorageLocation:
        """Where the object ``name`` (one of :meth:`Offloader.object_names`) lives."""
        for seg in self.segments:
            if seg.driver_name is not None and name in (seg.uuid, segment_index_name(seg.uuid)):
                return self.segment_location(seg)
        return self.own_location

    def only(self, segments: Iterable[SegmentRef], ledger_part: bool) -> OffloadTarget:
        """The same target narrowed to some of its parts (for verifying or deleting them alone)."""
        keep = tuple(segments)
        msb, lsb = (self.uid_msb, self.uid_lsb) if ledger_part else (0, 0)
        return OffloadTarget(self.driver_name, self.driver_metadata, msb, lsb, self.ledger_id, keep,
                             self.managed_ledger_name)

    @classmethod
    def from_offload_context(cls, ledger_id: int, context: Mapping[str, Any],
                             managed_ledger_name: str | None = None) -> OffloadTarget:
        """Build from the message's ``offloadContext`` JSON object
        (``uidMsb``, ``uidLsb``, ``driverName``, ``driverMetadata``, ``segments`` with each
        segment's optional ``driverName``/``driverMetadata``)."""
        try:
            segments = tuple(_segment_of(s) for s in context.get("segments") or ())
            return cls(
                driver_name=str(context["driverName"]),
                driver_metadata={str(k): str(v) for k, v in (context.get("driverMetadata") or {}).items()},
                uid_msb=int(context["uidMsb"]),
                uid_lsb=int(context["uidLsb"]),
                ledger_id=int(ledger_id),
                segments=segments,
                managed_ledger_name=managed_ledger_name,
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"invalid offloadContext: {e}") from e


def _segment_of(s: Mapping[str, Any]) -> SegmentRef:
    driver = s.get("driverName")
    metadata = s.get("driverMetadata")
    if driver is None and metadata is not None:
        raise ValueError("a segment's driverMetadata needs its driverName")
    return SegmentRef(int(s["uidMsb"]), int(s["uidLsb"]), None if driver is None else str(driver),
                      None if driver is None else {str(k): str(v) for k, v in (metadata or {}).items()})


@dataclass(frozen=True, slots=True)
class StorageLocation:
    """Where a driver keeps objects, naming no ledger: what listing needs.

    The same two fields as :class:`OffloadTarget` (``driver_name``, ``driver_metadata``:
    ``bucket``/``region``/``serviceEndpoint``, or ``storageBasePath``), so the
    allow-list judges a listing exactly as it judges a deletion."""

    driver_name: str
    driver_metadata: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "driver_metadata", dict(self.driver_metadata))

    def __hash__(self) -> int:  # a dict is not hashable: the location is its driver and sorted metadata
        return hash((self.driver_name, tuple(sorted(self.driver_metadata.items()))))


#: What the allow-list and a backend's addressing read: a target, or a bare location.
Located = OffloadTarget | StorageLocation


# --------------------------------------------------------------------------- results


class ObjectDeleteOutcome(StrEnum):
    """What happened to one tiered-storage object of a deletion."""

    DELETED = "deleted"
    #: Already gone: success, so a retried deletion is idempotent.
    ABSENT = "absent"


@dataclass(frozen=True, slots=True)
class ObjectHead:
    """What a HEAD (or ``stat``) tells us about one object."""

    name: str
    size: int
    #: User metadata, keys lower-cased (S3 returns them so; jclouds writes them so).
    user_metadata: Mapping[str, str] = field(default_factory=dict)
    #: When the object was written (epoch ms), for the age guard of orphan/manual requests.
    last_modified_ms: int | None = None


# --------------------------------------------------------------------------- index facts


class IndexKind(StrEnum):
    """The two things an index can say, and why each proves something different."""

    #: Embeds the source ledger's BookKeeper metadata (per-ledger index, MapFile
    #: ``data``): names the managed ledger, not the ledger id.
    LEDGER = "ledger"
    #: A streaming segment's index: names its ledger ids, not their topic.
    SEGMENT = "segment"


@dataclass(frozen=True, slots=True)
class IndexRef:
    """One index object of a target, and the data object it describes."""

    kind: IndexKind
    index_name: str
    data_name: str


class IndexState(StrEnum):
    """How far reading one index object got."""

    #: Decoded: :attr:`IndexFacts.source` or :attr:`IndexFacts.ledgers` hold what it says.
    READ = "read"
    #: Neither the index nor its data exists.
    ABSENT = "absent"
    #: The data exists but the index (or the part holding the metadata) does not:
    #: an interrupted offload or deletion.
    INDEX_MISSING = "index_missing"
    #: Present, in a layout or encoding we do not decode.
    UNDECODED = "undecoded"
    #: Present, but not an offload index we understand (bad magic, truncated,
    #: another object format version).
    MALFORMED = "malformed"


@dataclass(frozen=True, slots=True)
class IndexFacts:
    """What one index object says, read but not judged."""

    ref: IndexRef
    state: IndexState
    #: What was found, in words, when the state is not READ (for logs and DLQ reasons).
    detail: str = ""
    #: LEDGER kind, READ: the source ledger's BookKeeper metadata.
    source: SourceLedgerMetadata | None = None
    #: SEGMENT kind, READ: ledger id -> what the index records about it.
    ledgers: Mapping[int, SegmentLedgerInfo] = field(default_factory=dict)
    #: Upstream's ``ManagedLedgerName`` user metadata on the objects: the index's
    #: own, or for a segment whose index lacks it, its data object's.
    object_ml_name: str | None = None
    #: The managed ledger whose directory holds the objects (filesystem layout only).
    location_ml_name: str | None = None


# --------------------------------------------------------------------------- the ABC


class Offloader(abc.ABC):
    """Deleter for one family of offload drivers.

    Implementations must call :meth:`check_allowed` at the top of every public
    method that touches storage, so a target outside the allow-list is never read
    or written, whatever order the caller uses.
    """

    #: Driver names (case-insensitive, as upstream's ``getProvider``) served by this class.
    driver_names: ClassVar[frozenset[str]]

    @abc.abstractmethod
    def check_allowed(self, target: OffloadTarget) -> None:
        """Raise :class:`OffloadNotAllowedError` unless the target is allowed."""

    @abc.abstractmethod
    def list_objects(self, where: StorageLocation, prefix: str = "",
                     start_after: str | None = None) -> Iterator[ObjectHead]:
        """Every object at ``where`` whose name starts with ``prefix`` and sorts after
        ``start_after``, in name order, lazily (a caller may stop early).

        For the orphan scan, which splits one bucket's listing into ranges of names
        and lists them in parallel.  ``user_metadata`` is empty (a listing does not
        return it).  Checks the allow-list first; storage trouble raises the usual
        typed errors (a missing bucket is an :class:`OffloadTargetError`, never "empty")."""

    def describe_object(self, name: str) -> ObjectName:
        """What an object's name says: kind, uuid, ledger id (the S3 family's names by default)."""
        return parse_object_name(name)

    def object_names(self, target: OffloadTarget) -> list[str]:
        """Every object that makes up the ledger's offloaded copy, data before index.

        Per-ledger offload: ``<uuid>-ledger-<id>`` and ``<uuid>-ledger-<id>-index``;
        each streaming segment: ``<uuid>`` and ``<uuid>-index``.
        """
        self.check_allowed(target)
        names: list[str] = []
        if target.has_ledger_uuid:
            names += [ledger_data_name(target.uuid, target.ledger_id),
                      ledger_index_name(target.uuid, target.ledger_id)]
        for seg in target.segments:
            names += [seg.uuid, segment_index_name(seg.uuid)]
        return names

    @abc.abstractmethod
    def head(self, target: OffloadTarget, name: str) -> ObjectHead | None:
        """The object's size and user metadata, or None if it does not exist."""

    def exists(self, target: OffloadTarget, name: str) -> bool:
        return self.head(target, name) is not None

    def stat_objects(self, target: OffloadTarget, names: Sequence[str]) -> dict[str, ObjectHead | None]:
        """Each named object's size and time (None: absent), for names of :meth:`object_names`.

        What presence checks and the sizes recorded before a delete need, and nothing more:
        ``user_metadata`` may be empty (a listing does not return it; read :meth:`head` for it).
        By default a :meth:`head` per name; a backend whose calls cost round trips answers several
        names with one call (the S3 family: one listing per object stem, see ``s3.py``)."""
        self.check_allowed(target)
        return {name: self.head(target, name) for name in unique(names)}

    @abc.abstractmethod
    def delete_objects(self, target: OffloadTarget, names: Sequence[str]) -> dict[str, ObjectDeleteOutcome]:
        """Delete ``names``; every name gets an outcome.  Absent is success."""

    def delete_all(self, target: OffloadTarget) -> dict[str, ObjectDeleteOutcome]:
        """Delete every object of the target (data first, so a crash in between
        leaves an index we can still verify on the retry)."""
        return self.delete_objects(target, self.object_names(target))

    def index_refs(self, target: OffloadTarget) -> list[IndexRef]:
        """The index objects that say whose data the target's objects hold.

        Per-ledger offload: ``<uuid>-ledger-<id>-index`` (of ``<uuid>-ledger-<id>``);
        each streaming segment: ``<uuid>-index`` (of ``<uuid>``).
        """
        self.check_allowed(target)
        refs: list[IndexRef] = []
        if target.has_ledger_uuid:
            refs.append(IndexRef(IndexKind.LEDGER, ledger_index_name(target.uuid, target.ledger_id),
                                 ledger_data_name(target.uuid, target.ledger_id)))
        for seg in target.segments:
            refs.append(IndexRef(IndexKind.SEGMENT, segment_index_name(seg.uuid), seg.uuid))
        return refs

    @abc.abstractmethod
    def read_index(self, target: OffloadTarget, ref: IndexRef) -> IndexFacts:
        """Read one index object (``ref`` from :meth:`index_refs`) and report what it says.

        Raises only for storage trouble (transient, target, not allowed); an index
        that is missing, undecodable or not an index at all is a fact, not an error.
        """


def unique(names: Iterable[str]) -> list[str]:
    """Names in order, duplicates dropped (a batch must not name a key twice)."""
    return list(dict.fromkeys(names))
