"""Carry out the deletes a batch decided on, and report each one's result.

BookKeeper deletes of a whole batch go out as multi-ops (one round trip per
hundred ledgers), each znode removed only at the version that was verified,
so a ledger whose metadata changed in between is left alone and re-verified
later.  Offloaded copies are deleted through their offloader; every step is
idempotent (an object already gone is success).

Never a blind repeat of a delete whose outcome is unknown: a batch applied
whose reply was lost, sent again whole, would find its znodes gone and record
"absent" for ledgers this daemon deleted.  The store reads back what is in
doubt (``MetadataStore.delete_many``); here only the znodes provably not
deleted (never sent) are tried again, and a znode gone on re-read is recorded
as deleted with that caveat, as the store's docstring argues.  Offloaded
objects likewise: S3 deletes are unconditional, so a retry after a failed try
is safe, but an object present before the first try and reported absent by the
last one was deleted by the try whose answer was lost: recorded as deleted, with
the same caveat, not as "absent".

Object stores have no conditional delete, so an offloaded copy is deleted once
however many requests name it: duplicates in one batch are deleted once (the
twins settle as "absent", what they would have found a moment later), and the
delete itself runs under a claim in the metadata store (``offload_claims.py``),
so of several daemons (or lane threads) holding requests for one copy only one
deletes it; the others defer, untried, and find it absent when they come back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from tenacity import Retrying

from deletion_service.delete_phase.offload.pool import in_parallel
from deletion_service.delete_phase.rules.decision import Action, Verdict
from deletion_service.delete_phase.rules.facts import DeleteResult, Facts, OffloadObject
from deletion_service.delete_phase.storage.offload_claims import Busy, Claim, OffloadClaims, claim_name
from deletion_service.delete_phase.storage.retry import TRANSIENT, in_process_retry
from deletion_service.failpoints import failpoint
from deletion_service.protocol.fate import DeleteStatus
from metastore.interface import MetadataStore, MetadataStoreUnavailable, NodeDeleteOutcome
from offloaders.interface import (
    ObjectDeleteOutcome,
    Offloader,
    OffloadError,
    OffloadTarget,
    OffloadTransientError,
)
from offloaders.registry import OffloaderSettings, offloader_for


class RateLimiter:
    """``maxDeletionsPerSecond``: a token bucket, so a backlog drains without a storm on the bookies."""

    def __init__(self, per_second: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.per_second = per_second
        self._clock, self._sleep = clock, sleep
        self._tokens = per_second
        self._last = clock()
        self._lock = threading.Lock()

    def acquire(self, n: int = 1) -> None:
        if self.per_second <= 0:
            return
        with self._lock:
            while True:
                now = self._clock()
                self._tokens = min(self.per_second, self._tokens + (now - self._last) * self.per_second)
                self._last = now
                if self._tokens >= min(n, self.per_second):
                    self._tokens -= n
                    return
                self._sleep((min(n, self.per_second) - self._tokens) / self.per_second)


class Executor:
    def __init__(
        self,
        bookkeeper_store: MetadataStore,
        offload: OffloaderSettings,
        limiter: RateLimiter | None = None,
        retry: Callable[[], Retrying] = in_process_retry,
        dry_run: bool = False,
        claims: OffloadClaims | None = None,
    ) -> None:
        self.bk_store = bookkeeper_store
        #: offloaded copies are claimed in the store the BookKeeper deletes go to: every replica shares it
        self.claims = claims or OffloadClaims(bookkeeper_store)
        self.offload = offload
        self.limiter = limiter or RateLimiter(0)
        self.retry = retry
        self.dry_run = dry_run

    def run(self, actions: Sequence[Action], facts: Sequence[Facts]) -> list[DeleteResult | None]:
        """For each action, ``None`` if it deletes nothing, else what its delete reported."""
        results: list[DeleteResult | None] = [None] * len(actions)
        deletes = [i for i, a in enumerate(actions) if a.verdict in DELETES]
        if self.dry_run:
            for i in deletes:
                results[i] = DeleteResult(DeleteStatus.DRY_RUN)
            return results
        if deletes:
            failpoint("delete.before-storage")
        bk = [i for i in deletes if actions[i].verdict == Verdict.DELETE_BOOKKEEPER]
        if bk:
            for i, result in zip(bk, self._delete_bookkeeper([facts[i] for i in bk], [actions[i] for i in bk]),
                                 strict=True):
                results[i] = result
        offload = [i for i in deletes if actions[i].verdict == Verdict.DELETE_OFFLOAD]
        if offload:
            for i, result in zip(offload, self._delete_offloads([facts[i] for i in offload]), strict=True):
                results[i] = result
        return results

    def _delete_offloads(self, facts: Sequence[Facts]) -> list[DeleteResult]:
        """Each copy once, however many requests in the batch name it: a twin of a copy deleted here
        settles as "absent" (what it would have found a moment later), else as its first did."""
        first: dict[str, int] = {}
        for i, f in enumerate(facts):
            assert f.offload is not None and f.offload.target is not None, "decided DELETE_OFFLOAD: it has a target"
            first.setdefault(claim_name(f.offload.target), i)
        unique = list(first.values())
        done = dict(zip(unique, in_parallel([(lambda i=i: self._delete_offload(facts[i])) for i in unique]),
                        strict=True))
        results = []
        for i, f in enumerate(facts):
            assert f.offload is not None and f.offload.target is not None
            result = done[first[claim_name(f.offload.target)]]
            twin = i not in done
            results.append(DeleteResult(DeleteStatus.ABSENT) if twin and result.status == DeleteStatus.DELETED
                           else result)
        return results

    def _delete_bookkeeper(self, facts: Sequence[Facts], actions: Sequence[Action]) -> list[DeleteResult]:
        targets = []
        for f, a in zip(facts, actions, strict=True):
            assert f.bookkeeper is not None and a.bookkeeper_version is not None
            targets.append((f.bookkeeper.path, a.bookkeeper_version))
        # A request delivered twice in one batch names the same znode twice: delete it once,
        # and report the twin as "absent" — which is what it would have found a moment later.
        unique = list(dict.fromkeys(targets))
        self.limiter.acquire(len(unique))
        try:
            outcomes = self._delete_znodes(unique)
        except Exception as e:  # noqa: BLE001 - a surprise stays a per-request failure, never a lost batch
            return [DeleteResult(DeleteStatus.TRANSIENT, f"{type(e).__name__}: {e}")] * len(targets)
        results, seen = [], set()
        for path, _ in targets:
            result = _ZNODE_RESULTS[outcomes[path]]
            results.append(DeleteResult(DeleteStatus.ABSENT) if path in seen and
                           result.status == DeleteStatus.DELETED else result)
            seen.add(path)
        return results

    def _delete_znodes(self, targets: list[tuple[str, int]]) -> dict[str, NodeDeleteOutcome]:
        """``delete_many``, then again (with the in-process backoff) for only the znodes it says were
        provably not deleted (``UNAVAILABLE``); one whose outcome is in doubt is never sent again here."""
        outcomes: dict[str, NodeDeleteOutcome] = {}
        todo = targets
        try:
            for attempt in self.retry():
                with attempt:
                    got = self.bk_store.delete_many(todo)
                    outcomes.update(got)
                    todo = [t for t in todo if got[t[0]] == NodeDeleteOutcome.UNAVAILABLE]
                    if todo:
                        raise MetadataStoreUnavailable(f"{len(todo)} ledger znode(s) not deleted: the metadata "
                                                       "store is unavailable")
        except TRANSIENT:
            pass  # what is left says UNAVAILABLE: re-verified when the request comes back
        return outcomes

    def _delete_offload(self, facts: Facts) -> DeleteResult:
        off = facts.offload
        assert off is not None and off.target is not None, "decided DELETE_OFFLOAD: a verified copy has a target"
        self.limiter.acquire()
        try:
            claim = self.claims.take(off.target)
        except Exception as e:  # noqa: BLE001 - the store did not answer: nothing deleted, tried again later
            return DeleteResult(DeleteStatus.TRANSIENT, f"could not claim the offloaded copy ({type(e).__name__}: "
                                                        f"{e}): not deleted")
        if isinstance(claim, Busy):
            return DeleteResult(DeleteStatus.CLAIMED, claim.value)
        try:
            return self._delete_claimed(off.target, claim)
        finally:
            self.claims.release(claim)

    def _delete_claimed(self, target: OffloadTarget, claim: Claim) -> DeleteResult:
        """Read the sizes of the copy's objects, renew the claim, delete them (see the module's docstring)."""
        failed_tries: list[OffloadTransientError] = []

        def delete_all(offloader: Offloader, target: OffloadTarget) -> dict[str, ObjectDeleteOutcome]:
            try:
                return offloader.delete_all(target)
            except OffloadTransientError as e:
                failed_tries.append(e)  # its deletes may have been applied: their replies are what failed
                raise

        try:
            offloader = offloader_for(target.driver_name, self.offload)
            sizes = self.retry()(_sizes, offloader, target)
            if not self.claims.renew(claim):
                return DeleteResult(DeleteStatus.TRANSIENT, CLAIM_LOST)
            outcomes = self.retry()(delete_all, offloader, target)
        except OffloadTransientError as e:
            return DeleteResult(DeleteStatus.TRANSIENT, str(e))
        except OffloadError as e:  # target error, or not allowed discovered late: an operator looks
            return DeleteResult(DeleteStatus.FAILED, str(e))
        except Exception as e:  # noqa: BLE001 - a surprise from one target stays with its request
            return DeleteResult(DeleteStatus.TRANSIENT, f"{type(e).__name__}: {e}")
        # An object present before the first try, absent for the last one after a try that failed, is
        # taken as deleted by that try (the same caveat as a znode's lost reply: see REPLY_LOST).
        lost = {name for name, o in outcomes.items()
                if failed_tries and o == ObjectDeleteOutcome.ABSENT and name in sizes}
        deleted = tuple(OffloadObject(name, sizes.get(name, -1)) for name, o in outcomes.items()
                        if o == ObjectDeleteOutcome.DELETED or name in lost)
        return DeleteResult(DeleteStatus.DELETED if deleted else DeleteStatus.ABSENT,
                            REPLY_LOST_OBJECTS.format(", ".join(sorted(lost))) if lost else "", objects=deleted)


def _sizes(offloader: Offloader, target: OffloadTarget) -> dict[str, int]:
    """Each object's size, read just before it is deleted: the audit trail says what went, and how much.

    One call per part of the copy on S3 (a listing of its stem, ``Offloader.stat_objects``), next to
    the deletes themselves; an object absent here and deleted anyway (written in between) is recorded
    with size -1."""
    heads = offloader.stat_objects(target, offloader.object_names(target))
    return {name: h.size for name, h in heads.items() if h is not None}


DELETES = frozenset({Verdict.DELETE_BOOKKEEPER, Verdict.DELETE_OFFLOAD})

#: The caveat a znode deleted with its reply lost carries into the audit record's reason.
REPLY_LOST = ("reply lost; gone on re-read with every znode of its atomic batch: taken as ours, though "
              "a deletion by another party in the meantime looks the same")

CLAIM_LOST = ("the claim on the offloaded copy was taken over while this daemon held it (a pause longer than "
              "its life): not deleted")

REPLY_LOST_OBJECTS = ("{} gone on re-read after a delete try that failed (reply lost): taken as ours, though a "
                      "deletion by another party in the meantime looks the same")

_ZNODE_RESULTS = {
    NodeDeleteOutcome.DELETED: DeleteResult(DeleteStatus.DELETED),
    NodeDeleteOutcome.DELETED_REPLY_LOST: DeleteResult(DeleteStatus.DELETED, REPLY_LOST),
    NodeDeleteOutcome.ABSENT: DeleteResult(DeleteStatus.ABSENT),
    NodeDeleteOutcome.BAD_VERSION: DeleteResult(DeleteStatus.BAD_VERSION),
    NodeDeleteOutcome.NOT_EMPTY: DeleteResult(DeleteStatus.FAILED, "ledger znode has children (not a ledger node?)"),
    NodeDeleteOutcome.UNKNOWN: DeleteResult(
        DeleteStatus.TRANSIENT, "the delete's reply was lost and the metadata store did not answer a re-read: "
                                "re-verified later"),
    NodeDeleteOutcome.UNAVAILABLE: DeleteResult(DeleteStatus.TRANSIENT, "metadata store unavailable: not deleted"),
}
