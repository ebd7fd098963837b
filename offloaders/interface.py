"""What the delete phase needs from tiered storage, and nothing more.

A ledger offloaded by Pulsar lives in tiered storage as objects whose names are
derived from the ledger id and the offload context's UUID (``uidMsb``/``uidLsb``).
Deleting them safely takes four steps, each a method here:

1. refuse a target outside the operator's allow-list (``OffloadNotAllowedError``),
   checked by every public method, so no caller can forget it;
2. name the objects (:meth:`Offloader.object_names`);
3. check that the index object really describes *this* ledger where the format
   lets us (:meth:`Offloader.verify_index_belongs`), because a wrong UUID in a
   message must never delete another ledger's data;
4. delete, where an object already gone counts as success (the delete phase is
   retried and must be idempotent).

Errors are typed by what the caller should do next: retry
(``OffloadTransientError``), ack without deleting (``OffloadNotAllowedError``,
``OffloadIndexMismatchError``), or send to the DLQ (``OffloadTargetError``).
"""

from __future__ import annotations

import abc
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

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


class OffloadIndexMismatchError(OffloadError):
    """The index object exists but describes another ledger (or is not an offload
    index at all).  Ack, never delete, count ``metadata_mismatch``."""


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


# --------------------------------------------------------------------------- target


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """One streaming-offload segment (``OffloadContext.offloadSegment``)."""

    uid_msb: int
    uid_lsb: int

    def __post_init__(self) -> None:
        _check_int64("segment uidMsb", self.uid_msb)
        _check_int64("segment uidLsb", self.uid_lsb)

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

    @classmethod
    def from_offload_context(cls, ledger_id: int, context: Mapping[str, Any],
                             managed_ledger_name: str | None = None) -> OffloadTarget:
        """Build from the message's ``offloadContext`` JSON object
        (``uidMsb``, ``uidLsb``, ``driverName``, ``driverMetadata``, ``segments``)."""
        try:
            segments = tuple(SegmentRef(int(s["uidMsb"]), int(s["uidLsb"]))
                             for s in context.get("segments") or ())
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


# --------------------------------------------------------------------------- results


class DeleteOutcome(StrEnum):
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


class Verification(StrEnum):
    #: The index names this ledger (or matched every expectation we could check).
    VERIFIED = "verified"
    #: Nothing proves whose data this is (index missing, or naming no managed
    #: ledger): the delete phase never deletes it, an operator decides.
    UNVERIFIABLE = "unverifiable"
    #: Neither index nor data exists: nothing to verify, nothing to delete.
    ABSENT = "absent"


@dataclass(frozen=True, slots=True)
class IndexExpectation:
    """What the caller knows about the ledger, to compare with the index.

    Every field is optional; only those given (and present in the index) are
    compared.  ``entries``/``size`` come from the managed ledger's ``LedgerInfo``
    (upstream sets ``size`` to BookKeeper's ledger length, ``entries`` to
    lastEntryId + 1); ``ctime_ms`` from BookKeeper metadata if it still exists.
    """

    managed_ledger_name: str | None = None
    entries: int | None = None
    size: int | None = None
    ctime_ms: int | None = None
    #: A streaming segment may hold several ledgers; deleting it for one ledger
    #: destroys the others' data.  Refused unless the caller says all of them go.
    allow_shared_segment_ledgers: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class IndexCheck:
    outcome: Verification
    detail: str
    #: Names of the index objects that were read.
    checked: tuple[str, ...] = ()
    #: The managed ledger the objects prove they belong to (VERIFIED only).
    owner: str | None = None


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

    @abc.abstractmethod
    def delete_objects(self, target: OffloadTarget, names: Sequence[str]) -> dict[str, DeleteOutcome]:
        """Delete ``names``; every name gets an outcome.  Absent is success."""

    def delete_all(self, target: OffloadTarget) -> dict[str, DeleteOutcome]:
        """Delete every object of the target (data first, so a crash in between
        leaves an index we can still verify on the retry)."""
        return self.delete_objects(target, self.object_names(target))

    @abc.abstractmethod
    def verify_index_belongs(self, target: OffloadTarget,
                             expect: IndexExpectation | None = None) -> IndexCheck:
        """Check that the index object(s) belong to ``target.ledger_id``.

        Returns VERIFIED / UNVERIFIABLE / ABSENT; raises
        :class:`OffloadIndexMismatchError` when the index contradicts the target.
        """


def unique(names: Iterable[str]) -> list[str]:
    """Names in order, duplicates dropped (a batch must not name a key twice)."""
    return list(dict.fromkeys(names))
