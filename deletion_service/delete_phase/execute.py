"""Carry out the deletes a batch decided on, and report each one's result.

BookKeeper deletes of a whole batch go out as multi-ops (one round trip per
hundred ledgers), each znode removed only at the version that was verified,
so a ledger whose metadata changed in between is left alone and re-verified
later.  Offloaded copies are deleted through their offloader; every step is
idempotent (an object already gone is success).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from tenacity import Retrying

from deletion_service.delete_phase.decision import Action, Verdict
from deletion_service.delete_phase.facts import DeleteResult, DeleteStatus, Facts, OffloadObject
from deletion_service.delete_phase.gather import TRANSIENT, in_parallel, in_process_retry
from deletion_service.failpoints import failpoint
from metastore.interface import MetadataStore, NodeDeleteOutcome
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
    ) -> None:
        self.bk_store = bookkeeper_store
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
        for i, result in zip(offload, in_parallel([(lambda i=i: self._delete_offload(facts[i])) for i in offload]),
                             strict=True):
            results[i] = result
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
            outcomes = self.retry()(self.bk_store.delete_many, unique)
        except TRANSIENT as e:
            return [DeleteResult(DeleteStatus.TRANSIENT, str(e))] * len(targets)
        except Exception as e:  # noqa: BLE001 - a surprise stays a per-request failure, never a lost batch
            return [DeleteResult(DeleteStatus.TRANSIENT, f"{type(e).__name__}: {e}")] * len(targets)
        results, seen = [], set()
        for path, _ in targets:
            result = _ZNODE_RESULTS[outcomes[path]]
            results.append(DeleteResult(DeleteStatus.ABSENT) if path in seen and
                           result.status == DeleteStatus.DELETED else result)
            seen.add(path)
        return results

    def _delete_offload(self, facts: Facts) -> DeleteResult:
        off = facts.offload
        assert off is not None and off.target is not None
        self.limiter.acquire()
        try:
            offloader = offloader_for(off.target.driver_name, self.offload)
            sizes = self.retry()(_sizes, offloader, off.target)
            outcomes = self.retry()(offloader.delete_all, off.target)
        except OffloadTransientError as e:
            return DeleteResult(DeleteStatus.TRANSIENT, str(e))
        except OffloadError as e:  # target error, or not allowed discovered late: an operator looks
            return DeleteResult(DeleteStatus.FAILED, str(e))
        except Exception as e:  # noqa: BLE001 - a surprise from one target stays with its request
            return DeleteResult(DeleteStatus.TRANSIENT, f"{type(e).__name__}: {e}")
        deleted = tuple(OffloadObject(name, sizes.get(name, -1)) for name, o in outcomes.items()
                        if o == ObjectDeleteOutcome.DELETED)
        return DeleteResult(DeleteStatus.DELETED if deleted else DeleteStatus.ABSENT, objects=deleted)


def _sizes(offloader: Offloader, target: OffloadTarget) -> dict[str, int]:
    """Each object's size, read just before it is deleted: the audit trail says what went, and how much.

    A handful of HEADs per ledger (data and index, per segment), next to the deletes themselves;
    an object absent here and deleted anyway (written in between) is recorded with size -1."""
    heads = (offloader.head(target, name) for name in offloader.object_names(target))
    return {h.name: h.size for h in heads if h is not None}


DELETES = frozenset({Verdict.DELETE_BOOKKEEPER, Verdict.DELETE_OFFLOAD})

_ZNODE_RESULTS = {
    NodeDeleteOutcome.DELETED: DeleteResult(DeleteStatus.DELETED),
    NodeDeleteOutcome.ABSENT: DeleteResult(DeleteStatus.ABSENT),
    NodeDeleteOutcome.BAD_VERSION: DeleteResult(DeleteStatus.BAD_VERSION),
    NodeDeleteOutcome.NOT_EMPTY: DeleteResult(DeleteStatus.FAILED, "ledger znode has children (not a ledger node?)"),
}
