"""Read an offloaded copy's index objects and have ``delete_phase.rules.verify_offload`` judge them; the I/O half of it.

``verify_offload.py`` is pure: it judges what an offloader reports.  This
module makes the calls: it reads each index object of a target and stops at
the first contradiction, and it charges each storage call to the breaker of
the location it went to (:class:`.breaker.TargetBreakers`), so one offload
target that stops answering pauses its own requests only.  The gatherer
(``gather.py``) builds its offload facts from here, the offload lane keys its
breakers with :func:`offload_target_keys`, and the offloaders' tests verify
real objects with :func:`verify_offloaded_copy`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from deletion_service.delete_phase.rules.verify_offload import (
    IndexCheck,
    IndexExpectation,
    Verification,
    combine,
    judge_index,
    judge_shared_segment,
)
from deletion_service.delete_phase.storage.breaker import TargetBreakers
from deletion_service.protocol.request import PendingDeleteLedgerInfo
from metastore.formats import ManagedLedgerInfo
from offloaders.allow_list import location_keys, target_key
from offloaders.interface import (
    IndexFacts,
    IndexRef,
    ObjectHead,
    Offloader,
    OffloadError,
    OffloadTarget,
    OffloadTransientError,
    StorageLocation,
)

T = TypeVar("T")


class ListingUnreadable(ValueError):
    """A managed ledger's list could not be read as such: what holds a segment cannot be known."""


class IndexReader(Protocol):
    """What verification reads: an :class:`Offloader`, or one charged to breakers (:class:`ChargedStorage`)."""

    def index_refs(self, target: OffloadTarget) -> list[IndexRef]: ...

    def read_index(self, target: OffloadTarget, ref: IndexRef) -> IndexFacts: ...


def verify_offloaded_copy(offloader: IndexReader, target: OffloadTarget,
                          expect: IndexExpectation | None = None,
                          listed: Callable[[str], ManagedLedgerInfo | None] | None = None) -> IndexCheck:
    """Read the target's index objects one by one and judge each (``verify_offload.py``).

    ``listed`` reads a managed ledger's list: given, a streaming segment that holds
    other ledgers too is judged by whether they are gone from the list of the managed
    ledger its objects name (:func:`judge_shared_segment`); without it, such a segment
    is a mismatch, as deleting it would delete their data.  A mismatch ends it: the
    indexes after it are not read, so a contradiction is reported as such even when
    reading the next one would have failed.  Storage trouble (transient, target, not
    allowed) propagates from the offloader."""
    checks: list[IndexCheck] = []
    for ref in offloader.index_refs(target):
        facts = offloader.read_index(target, ref)
        if listed is not None:
            check = judge_shared_segment(facts, target.ledger_id, expect, listed, target.managed_ledger_name)
        else:
            check = judge_index(facts, target.ledger_id, expect, target.managed_ledger_name)
        checks.append(check)
        if check.outcome is Verification.MISMATCH:
            break
    return combine(checks)


def offload_target_keys(request: PendingDeleteLedgerInfo) -> list[str]:
    """The breaker keys of every location an offload request names (none for a LEDGER request)."""
    ctx = request.offload_context
    if ctx is None:
        return []
    segs = [(s.driver_name, s.driver_metadata or {}) for s in ctx.segments if s.driver_name is not None]
    whole = not ctx.segments or bool(ctx.uid_msb or ctx.uid_lsb) or len(segs) < len(ctx.segments)
    return location_keys(([(ctx.driver_name, ctx.driver_metadata)] if whole else []) + segs)


def probe_for(offloader: Offloader, target: OffloadTarget, name: str) -> Callable[[], object]:
    """A cheap "does this object's target answer?": a HEAD of it (absent is an answer too, and so
    is a refusal such as no bucket or access denied: only a transient failure is "no answer")."""
    def probe() -> None:
        try:
            offloader.head(target, name)
        except OffloadTransientError:
            raise
        except OffloadError:
            return

    return probe


class ChargedStorage:
    """An offloader's storage calls for one target, each failure charged to the target it went to
    (its breaker, :class:`TargetBreakers`, probed by :func:`probe_for`), each answer credited to it."""

    def __init__(self, offloader: Offloader, target: OffloadTarget, breakers: TargetBreakers) -> None:
        self.offloader, self.target, self.breakers = offloader, target, breakers

    def _call(self, name: str, call: Callable[[], T]) -> T:
        where = self.target.location_of(name)
        key = target_key(where.driver_name, where.driver_metadata)
        try:
            out = call()
        except OffloadTransientError as e:
            self.breakers.failed(key, str(e), probe_for(self.offloader, self.target, name))
            raise
        except OffloadError:
            self.breakers.answered(key)  # a refusal is an answer
            raise
        self.breakers.answered(key)
        return out

    def head(self, name: str) -> ObjectHead | None:
        return self._call(name, lambda: self.offloader.head(self.target, name))

    def stat_objects(self, names: Sequence[str]) -> dict[str, ObjectHead | None]:
        """``Offloader.stat_objects``, one call per location the names are at, each charged to its own."""
        by_location: dict[StorageLocation, list[str]] = {}
        for name in names:
            by_location.setdefault(self.target.location_of(name), []).append(name)
        out: dict[str, ObjectHead | None] = {}
        for located in by_location.values():
            out.update(self._call(located[0], lambda located=located: self.offloader.stat_objects(self.target,
                                                                                                   located)))
        return out

    def index_refs(self, target: OffloadTarget) -> list[IndexRef]:
        return self.offloader.index_refs(target)

    def read_index(self, target: OffloadTarget, ref: IndexRef) -> IndexFacts:
        return self._call(ref.index_name, lambda: self.offloader.read_index(target, ref))
