"""The delete pipeline: gather → decide → delete → settle, the one spelling of it.

The consumer (``worker.py``) and the admin API's synchronous delete
(``service.py``) both call :meth:`DeletePipeline.run`; only what they do with
the settled :class:`Action` differs (ack/reconsume/DLQ vs an HTTP status).  Two
copies of this sequence drifted once (a dry run answered 502), so there is one.

Every request is settled on its own: a gatherer that fails for the batch is
asked again request by request, a decision that raises settles only its own
request (as an internal error, retried, then dead-lettered), and the executor
reports a result per request.  Nothing here can fail a batch because of one
message.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from deletion_service.delete_phase.rules import decision
from deletion_service.delete_phase.rules.decision import Action, Kind, Policy
from deletion_service.delete_phase.rules.facts import DeleteResult, Evidence, Facts
from deletion_service.delete_phase.storage.execute import DELETES
from deletion_service.protocol.fate import DeleteStatus
from deletion_service.protocol.request import PendingDeleteLedgerInfo

_log = logging.getLogger(__name__)


class Gatherer(Protocol):
    """What the pipeline needs of gathering (``gather.FactGatherer``; the worker's disposition tests
    script one, and declaring this makes the checker hold the script to the real signature)."""

    def gather(self, requests: Sequence[PendingDeleteLedgerInfo], attempts: Sequence[int],
               grace_since: Sequence[int | None] | None = None) -> list[Facts]:
        """One :class:`Facts` per request, in order; failures recorded as facts, not raised."""
        ...


class DeleteExecutor(Protocol):
    """What the pipeline needs of deleting (``execute.Executor``)."""

    dry_run: bool

    def run(self, actions: Sequence[Action], facts: Sequence[Facts]) -> list[DeleteResult | None]:
        """One result per action, in order (``None``: the action deletes nothing)."""
        ...


class DeleteCounts(Protocol):
    """Where a batch's delete results are counted (``DeletionMetrics``; in the delete process, a tally
    sent back with the verdicts)."""

    def count_deletes(self, results: Counter[tuple[str, DeleteStatus]]) -> None: ...


@dataclass(frozen=True)
class Decided:
    """A batch between :meth:`DeletePipeline.decide` and :meth:`DeletePipeline.delete`."""

    requests: list[PendingDeleteLedgerInfo]
    attempts: list[int]
    policy: Policy
    facts: list[Facts]
    actions: list[Action]

    @property
    def deletes(self) -> bool:
        """Whether a verdict asks :meth:`DeletePipeline.delete` to delete (or, in a dry run, to say it would)."""
        return any(a.verdict in DELETES for a in self.actions)


class DeletePipeline:
    def __init__(self, gatherer: Gatherer, executor: DeleteExecutor, metrics: DeleteCounts) -> None:
        self.gatherer = gatherer
        self.executor = executor
        self.metrics = metrics

    @property
    def dry_run(self) -> bool:
        return self.executor.dry_run

    def run(self, requests: Sequence[PendingDeleteLedgerInfo], attempts: Sequence[int],
            policy: Policy, grace_since: Sequence[int | None] | None = None) -> list[Action]:
        """The settled action of each request, in order (``grace_since``: see ``Facts.grace_since_ms``)."""
        return self.delete(self.decide(requests, attempts, policy, grace_since))

    def decide(self, requests: Sequence[PendingDeleteLedgerInfo], attempts: Sequence[int],
               policy: Policy, grace_since: Sequence[int | None] | None = None) -> Decided:
        """The first half of :meth:`run`: the facts read and the table's verdicts, nothing deleted yet.  The
        delete process stops here until the daemon has recorded the batch before (see ``delete_process.py``)."""
        facts = self._gather(requests, attempts, grace_since or [None] * len(requests))
        actions = [self._decide(r, f, policy) for r, f in zip(requests, facts, strict=True)]
        return Decided(list(requests), list(attempts), policy, facts, actions)

    def delete(self, decided: Decided) -> list[Action]:
        """The second half of :meth:`run`: the deletes at the verified versions, and each verdict settled."""
        requests, attempts, policy, facts, actions = (decided.requests, decided.attempts, decided.policy,
                                                      decided.facts, decided.actions)
        try:
            results: list[DeleteResult | None] = self.executor.run(actions, facts)
        except Exception as e:  # noqa: BLE001 - the executor isolates per request; this is the last guard
            _log.exception("unexpected error while deleting a batch")
            return [(a if a.verdict not in DELETES else
                     decision.retry_later(f"{type(e).__name__}: {e}", t, policy, kind=Kind.INTERNAL_ERROR)
                     ).with_evidence(_evidence(f, None))
                    for a, f, t in zip(actions, facts, attempts, strict=True)]
        settled = []
        counted: Counter[tuple[str, DeleteStatus]] = Counter()
        for request, action, result, f, tries in zip(requests, actions, results, facts, attempts, strict=True):
            if result is not None:
                counted[(request.ledger_type.value, result.status)] += 1
                action = decision.settle_delete(action, result, tries, policy)
            # What was verified and deleted rides along with the verdict, for the audit trail.
            settled.append(action.with_evidence(_evidence(f, result)))
        self.metrics.count_deletes(counted)
        return settled

    def _gather(self, requests: Sequence[PendingDeleteLedgerInfo], attempts: Sequence[int],
                grace_since: Sequence[int | None]) -> list[Facts]:
        try:
            return self.gatherer.gather(requests, attempts, grace_since)
        except Exception:  # noqa: BLE001 - find the request that causes it; the others go on
            _log.exception("gathering a batch of %d failed; gathering request by request", len(requests))
        out = []
        for request, tries, since in zip(requests, attempts, grace_since, strict=True):
            try:
                [facts] = self.gatherer.gather([request], [tries], [since])
            except Exception as e:  # noqa: BLE001 - this request's own failure
                facts = Facts(0, tries, internal_error=f"{type(e).__name__}: {e}")
            out.append(facts)
        return out

    @staticmethod
    def _decide(request: PendingDeleteLedgerInfo, facts: Facts, policy: Policy) -> Action:
        try:
            return decision.decide(request, facts, policy)
        except Exception as e:  # noqa: BLE001 - a bug in one row must not take the batch with it
            _log.exception("deciding %s failed", request.describe())
            return decision.retry_later(f"{type(e).__name__}: {e}", facts.attempts, policy,
                                        kind=Kind.INTERNAL_ERROR)


def _evidence(facts: Facts, result: DeleteResult | None) -> Evidence:
    """The audit trail's evidence; without the custom metadata when it cannot be read as text.  Found from
    outside: a BookKeeper znode whose custom-metadata key is not UTF-8 raised here, after every delete of
    its batch, and failed the batch (the delete process died with it; in the daemon, it stayed unacked)."""
    try:
        return Evidence.of(facts, result)
    except Exception:  # noqa: BLE001 - one ledger's unreadable metadata must not fail its batch
        bk = facts.bookkeeper
        _log.exception("the evidence of %s could not be built in full; recorded without its custom metadata",
                       bk.path if bk is not None else "a request")
        return Evidence(bk_version=bk.version if bk is not None else None, references=facts.references,
                        offload_objects=result.objects if result is not None else ())
