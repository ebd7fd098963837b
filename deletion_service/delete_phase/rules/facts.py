"""What the delete phase knows about one request before it decides.

Gathering (``gather.py``) fills these from the metadata store, BookKeeper's
metadata and tiered storage; deciding (``decision.py``) is a pure function of
them.  Everything that can go wrong while gathering is recorded here as a
fact rather than raised, so the decision table sees every case.
"""

from __future__ import annotations

from dataclasses import dataclass

from deletion_service.protocol.fate import DeleteStatus
from metastore.formats import LedgerMetadata
from offloaders.interface import OffloadTarget


@dataclass(frozen=True)
class BookKeeperFact:
    """The ledger's znode as read: absent, unreadable, or decoded at a version."""

    path: str
    metadata: LedgerMetadata | None = None  # None: absent (or unreadable, see error)
    version: int | None = None
    znode_ctime_ms: int | None = None
    unreadable: str | None = None  # why the bytes could not be decoded

    @property
    def ctime_ms(self) -> int | None:
        if self.metadata is None:
            return None
        return self.metadata.ctime if self.metadata.ctime is not None else self.znode_ctime_ms


@dataclass(frozen=True)
class OffloadFact:
    """The offloaded copy as seen through its offloader."""

    target: OffloadTarget | None = None
    not_allowed: str | None = None  # refused by the allow-list or an unknown driver
    index_mismatch: str | None = None  # the index describes another ledger (or another topic)
    target_error: str | None = None  # permanent problem with the target (missing bucket, access denied)
    present: bool = False  # any of its objects exists
    #: what proves the objects belong to the request's ledger and topic (None: nothing does)
    verified: str | None = None
    #: why nothing proves it (index missing, or naming no managed ledger): never deleted
    unverifiable: str | None = None
    oldest_object_ms: int | None = None  # for the age guard of orphan/manual requests
    #: a streaming segment a ledger still listed holds (``verify_offload.judge_shared_segment``): in use
    held_by: str | None = None


@dataclass(frozen=True)
class Facts:
    """Everything the decision needs, for one request."""

    now_ms: int
    attempts: int = 0  # RECONSUMETIMES: how many times it was already reconsumed
    references: tuple[str, ...] = ()  # why the ledger is still in use; empty: unreferenced
    unverifiable: str | None = None  # metadata needed to decide could not be read or decoded
    invalid: str | None = None  # the request can never be acted on (found while gathering)
    internal_error: str | None = None  # a bug or surprise while gathering this request (retried, then DLQ)
    transient: str | None = None  # a dependency failed while gathering (retry later)
    bookkeeper: BookKeeperFact | None = None
    offload: OffloadFact | None = None
    #: why the metadata proves the (unreferenced) data can never be referenced again
    #: (``reference_model.superseded``); ``None``: unproven, so a young ledger waits out the age guard
    superseded: str | None = None
    #: when this daemon first held the request still in use within its grace (its own clock,
    #: carried on its RETRY copies); ``None``: not yet
    grace_since_ms: int | None = None


@dataclass(frozen=True)
class OffloadObject:
    """One tiered-storage object a delete removed, with the size a HEAD saw just before."""

    key: str
    size: int


@dataclass(frozen=True)
class Evidence:
    """What the delete phase verified before it settled a request, kept for the audit trail.

    Taken from the facts the decision read and the delete that ran, never re-read
    afterwards: an audit record must say what the daemon *acted on*, not what the
    store holds by the time someone asks.  ``references`` is why the ledger was
    still in use (empty: nothing referenced it when checked)."""

    bk_version: int | None = None
    custom_metadata: tuple[tuple[str, str], ...] = ()  # BookKeeper's custom metadata, values as UTF-8 text
    references: tuple[str, ...] = ()
    offload_objects: tuple[OffloadObject, ...] = ()  # deleted, with their sizes

    @classmethod
    def of(cls, facts: Facts, result: DeleteResult | None) -> Evidence:
        bk = facts.bookkeeper
        custom: tuple[tuple[str, str], ...] = ()
        if bk is not None and bk.metadata is not None:
            custom = tuple(sorted(bk.metadata.custom_texts.items()))
        return cls(bk_version=bk.version if bk is not None else None, custom_metadata=custom,
                   references=facts.references, offload_objects=result.objects if result is not None else ())


@dataclass(frozen=True)
class DeleteResult:
    """What one delete reported (``execute.py``), for ``decision.settle_delete``."""

    status: DeleteStatus
    detail: str = ""
    #: offload deletes: the objects this delete removed (not those already gone), with their sizes
    objects: tuple[OffloadObject, ...] = ()
