"""Rule 1: every delete-phase decision lives here, as one table over (request, facts).

Rows are tried in order and the first match wins, exactly as the design's
table reads.  No I/O: gathering produced :class:`Facts`, and ``execute.py``
carries out the :class:`Action`.  What happens *after* an action (it
succeeded, hit a transient error, ran out of retries) is :func:`settle`, also
here, so the whole life of a request can be read in one file and every path
provably ends in ack, reconsume or DLQ.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from deletion_service.delete_phase.facts import Facts
from deletion_service.delete_phase.verify import mismatch
from deletion_service.model import LedgerType, PendingDeleteLedgerInfo, Reason


class Verdict(StrEnum):
    DLQ = "dlq"  # park with a reason for an operator, then ack
    ACK_IN_USE = "still_in_use"
    ACK_MISMATCH = "metadata_mismatch"
    ACK_ABSENT = "absent"  # already deleted: success, idempotent
    RECONSUME = "reconsume"  # not yet (open, young) or transient failure: publish to RETRY, then ack
    DELETE_BOOKKEEPER = "delete_bookkeeper"
    DELETE_OFFLOAD = "delete_offload"


class Outcome(StrEnum):
    """How a request ended, as counted in ``…_acked_total{outcome}``."""

    DELETED = "deleted"
    ABSENT = "absent"
    STILL_IN_USE = "still_in_use"
    METADATA_MISMATCH = "metadata_mismatch"
    RECONSUMED = "reconsumed"
    DLQ = "dlq"


@dataclass(frozen=True)
class Action:
    verdict: Verdict
    reason: str
    delay_s: float = 0.0  # for RECONSUME
    bookkeeper_version: int | None = None  # for DELETE_BOOKKEEPER: delete only at this version
    #: DLQ: the short reason an operator filters on (the DLQ's `reason` property).
    #: RECONSUME: ``not-yet`` (the ledger's state) or ``transient`` (a dependency failed).
    kind: str = ""


@dataclass(frozen=True)
class Policy:
    """The configuration the table reads (a subset of ``DeletionConfig``)."""

    reconsume_later_s: float = 600
    max_retries: int = 10
    min_ledger_age_s: float = 86_400


AGE_GUARDED = frozenset({Reason.ORPHAN, Reason.MANUAL})


def invalid(detail: str) -> Action:
    """Row 1: an undecodable or invalid payload goes to the DLQ, never crashes the consumer."""
    return Action(Verdict.DLQ, f"invalid request: {detail}", kind="invalid-request")


def decide(request: PendingDeleteLedgerInfo, facts: Facts, policy: Policy) -> Action:
    if facts.transient is not None:
        return retry_later(facts.transient, facts.attempts, policy)
    if facts.unverifiable is not None:
        return Action(Verdict.DLQ, f"cannot verify: {facts.unverifiable}", kind="cannot-verify")
    if facts.references:
        return Action(Verdict.ACK_IN_USE, "; ".join(facts.references))
    if request.ledger_type == LedgerType.LEDGER:
        return _decide_bookkeeper(request, facts, policy)
    return _decide_offload(request, facts, policy)


def _decide_bookkeeper(request: PendingDeleteLedgerInfo, facts: Facts, policy: Policy) -> Action:
    bk = facts.bookkeeper
    assert bk is not None, "gathering always records a BookKeeper fact for LEDGER requests"
    if bk.unreadable is not None:
        return Action(Verdict.DLQ, f"BookKeeper metadata at {bk.path} unreadable: {bk.unreadable}",
                      kind="cannot-verify")
    if bk.metadata is None:
        return Action(Verdict.ACK_ABSENT, f"{bk.path} already absent")
    differs = mismatch(request, bk.metadata)
    if differs is not None:
        return Action(Verdict.ACK_MISMATCH, differs)
    if bk.metadata.state != "CLOSED":
        return _not_yet(f"ledger is {bk.metadata.state}", policy.reconsume_later_s, facts, policy)
    young = _too_young(request, bk.ctime_ms, facts, policy)
    if young is not None:
        return young
    return Action(Verdict.DELETE_BOOKKEEPER, "verified", bookkeeper_version=bk.version)


def _decide_offload(request: PendingDeleteLedgerInfo, facts: Facts, policy: Policy) -> Action:
    off = facts.offload
    assert off is not None, "gathering always records an offload fact for OFFLOAD_LEDGER requests"
    if off.not_allowed is not None:
        return Action(Verdict.ACK_MISMATCH, off.not_allowed)
    if off.index_mismatch is not None:
        return Action(Verdict.ACK_MISMATCH, off.index_mismatch)
    if off.target_error is not None:
        return Action(Verdict.DLQ, off.target_error, kind="offload-target-error")
    if not off.present:
        return Action(Verdict.ACK_ABSENT, "offloaded objects already absent")
    young = _too_young(request, off.oldest_object_ms, facts, policy)
    if young is not None:
        return young
    detail = off.index.detail if off.index is not None else "verified"
    return Action(Verdict.DELETE_OFFLOAD, detail)


def _too_young(request: PendingDeleteLedgerInfo, created_ms: int | None, facts: Facts, policy: Policy) -> Action | None:
    """Orphan and manual requests come from scans and people, not from Pulsar's own trim:
    a ledger created moments ago may simply not be registered yet."""
    if request.reason not in AGE_GUARDED:
        return None
    if created_ms is None:
        return Action(Verdict.DLQ, "cannot tell the ledger's age for an orphan/manual request", kind="cannot-verify")
    remaining_s = policy.min_ledger_age_s - (facts.now_ms - created_ms) / 1000
    if remaining_s <= 0:
        return None
    # Wait exactly until it is old enough: one retry instead of many.
    return _not_yet(f"ledger younger than minLedgerAgeSeconds ({policy.min_ledger_age_s:g}s)",
                    max(remaining_s, 1.0), facts, policy)


def _not_yet(why: str, delay_s: float, facts: Facts, policy: Policy, kind: str = "not-yet") -> Action:
    if facts.attempts >= policy.max_retries:
        return Action(Verdict.DLQ, f"max retries ({policy.max_retries}) reached: {why}", kind="max-retries-reached")
    return Action(Verdict.RECONSUME, why, delay_s=delay_s, kind=kind)


def retry_later(error: str, attempts: int, policy: Policy) -> Action:
    """A transient failure that in-process retries did not cure."""
    return _not_yet(f"transient failure: {error}", policy.reconsume_later_s, Facts(0, attempts), policy,
                    kind="transient")


def settle_delete(action: Action, result: str, attempts: int, policy: Policy) -> Action:
    """After a delete ran: what becomes of the request.

    ``result`` is ``deleted``, ``absent``, ``bad_version`` (the ledger changed
    since it was verified: verify again later), ``transient:<error>`` or
    ``failed:<error>`` (a permanent failure an operator must see).
    """
    assert action.verdict in (Verdict.DELETE_BOOKKEEPER, Verdict.DELETE_OFFLOAD)
    if result in ("deleted", "absent"):
        return Action(Verdict.ACK_ABSENT if result == "absent" else action.verdict, result)
    if result == "bad_version":
        return retry_later("ledger metadata changed since it was verified", attempts, policy)
    if result.startswith("transient:"):
        return retry_later(result.removeprefix("transient:"), attempts, policy)
    return Action(Verdict.DLQ, result.removeprefix("failed:"), kind="delete-failed")


def outcome_of(final: Action) -> Outcome:
    """The terminal outcome of a settled action (for metrics and logs)."""
    return {
        Verdict.DELETE_BOOKKEEPER: Outcome.DELETED,
        Verdict.DELETE_OFFLOAD: Outcome.DELETED,
        Verdict.ACK_ABSENT: Outcome.ABSENT,
        Verdict.ACK_IN_USE: Outcome.STILL_IN_USE,
        Verdict.ACK_MISMATCH: Outcome.METADATA_MISMATCH,
        Verdict.RECONSUME: Outcome.RECONSUMED,
        Verdict.DLQ: Outcome.DLQ,
    }[final.verdict]
