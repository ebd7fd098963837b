"""Rule 1: every delete-phase decision lives here, as one table over (request, facts).

Rows are tried in order and the first match wins, exactly as the design's
table reads.  No I/O: gathering produced :class:`Facts`, and ``execute.py``
carries out the :class:`Action`.  What happens *after* an action (it
succeeded, hit a transient error, ran out of retries) is :func:`settle_delete`,
also here, and so are the decisions met before any fact is gathered (an
undecodable payload, a request from another namespace, an offload lane with no
room) and while disposing (a RETRY copy that cannot be built), so every verdict
is chosen in this file and every path provably ends in ack, reconsume or DLQ.
How the message carrying a verdict then leaves our hands is the lifecycle table
(``lifecycle.py``); how a verdict looks outside (metrics, audit, HTTP, DLQ
reason) is ``outcomes.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import assert_never

from deletion_service.delete_phase.rules.facts import DeleteResult, Evidence, Facts
from deletion_service.delete_phase.rules.verify_ledger import mismatch
from deletion_service.protocol.fate import DeleteStatus
from deletion_service.protocol.request import LedgerType, PendingDeleteLedgerInfo, Reason


class Verdict(StrEnum):
    DLQ = "dlq"  # park with a reason for an operator, then ack
    ACK_IN_USE = "still_in_use"
    ACK_MISMATCH = "metadata_mismatch"
    ACK_ABSENT = "absent"  # already deleted: success, idempotent
    RECONSUME = "reconsume"  # not yet (open, young, in-use grace) or transient failure: publish to RETRY, then ack
    DELETE_BOOKKEEPER = "delete_bookkeeper"
    DELETE_OFFLOAD = "delete_offload"
    DRY_RUN = "dry_run"  # verified and would be deleted; nothing done (``run --dry-run``)


class Kind(StrEnum):
    """Why a request is parked or retried: the DLQ's ``reason`` property, and the retry's cause."""

    NONE = ""
    INVALID_REQUEST = "invalid-request"
    CANNOT_VERIFY = "cannot-verify"
    OFFLOAD_TARGET_ERROR = "offload-target-error"
    MAX_RETRIES = "max-retries-reached"
    DELETE_FAILED = "delete-failed"
    INTERNAL_ERROR = "internal-error"
    NOT_YET = "not-yet"  # the ledger's state: OPEN, IN_RECOVERY, too young
    IN_USE_GRACE = "in-use-grace"  # still listed, but its mark phase may not have written yet
    TRANSIENT = "transient"  # a dependency failed
    CROSS_NAMESPACE = "cross-namespace"  # read from one namespace's topic, naming another's ledger
    #: the offload lane has no room for it, or its tenant holds its share: untried, not an outage
    LANE_FULL = "offload-lane-full"


@dataclass(frozen=True)
class Action:
    verdict: Verdict
    reason: str
    delay_s: float = 0.0  # for RECONSUME
    bookkeeper_version: int | None = None  # for DELETE_BOOKKEEPER: delete only at this version
    kind: Kind = Kind.NONE
    #: for MAX_RETRIES: the kind of the failure that used up the last try (an outage must not be it)
    cause: Kind = Kind.NONE
    #: for RECONSUME: False when the request was never tried (deferred through an outage): attempts unchanged
    counts: bool = True
    #: for an in-use-grace RECONSUME: when the grace began (this daemon's clock), carried on the RETRY copy
    grace_since_ms: int | None = None
    #: what was verified (and deleted) on the way to this action, for the audit trail; filled by the
    #: pipeline, not by the table, and not part of the verdict (so not compared)
    evidence: Evidence | None = field(default=None, compare=False)

    @property
    def transient(self) -> bool:
        """A dependency did not answer: reconsumed, or dead-lettered for it after the last try."""
        return Kind.TRANSIENT in (self.kind, self.cause)

    def with_evidence(self, evidence: Evidence) -> Action:
        """This action with what was verified attached (the pipeline's last step, once per request:
        ``dataclasses.replace`` cost 4x this there; ``test_with_evidence_keeps_every_field`` holds
        the field list here to the class's)."""
        return Action(self.verdict, self.reason, self.delay_s, self.bookkeeper_version, self.kind, self.cause,
                      self.counts, self.grace_since_ms, evidence)


@dataclass(frozen=True)
class Policy:
    """The configuration the table reads (a subset of ``DeletionConfig``)."""

    reconsume_later_s: float = 600
    max_retries: int = 10
    min_ledger_age_s: float = 86_400
    in_use_grace_s: float = 300

    @property
    def max_delay_s(self) -> float:
        """No retry waits longer than the longest delay the table itself can choose.

        Delays come from config, never from a message: a RETRY message's
        ``DELAY_TIME`` is capped at this too, so whoever can publish to RETRY
        cannot park requests for a year (nor can a clock-skewed ``ctime``)."""
        return max(self.reconsume_later_s, self.in_use_grace_s, self.min_ledger_age_s, 1.0)


#: Requests a mark phase sends *before* it removes the ledger from its list.
MARK_PHASE = frozenset({Reason.TRIM, Reason.TOPIC_DELETED})
#: How soon a request for an offloaded copy another daemon is deleting looks again (at most).
CLAIMED_RETRY_S = 30.0
#: A grace start further ahead of our clock than this is not believed (it would never end).
CLOCK_SKEW_S = 60.0


def invalid(detail: str) -> Action:
    """Row 1: an undecodable or invalid payload goes to the DLQ, never crashes the consumer."""
    return Action(Verdict.DLQ, f"invalid request: {detail}", kind=Kind.INVALID_REQUEST)


def cross_namespace(why: str) -> Action:
    """Before any fact is gathered: a request read on one namespace's topic that names another's
    ledger (namespace scope) is parked for its origin's operator, never acted on here."""
    return Action(Verdict.DLQ, why, kind=Kind.CROSS_NAMESPACE)


def offload_lane_full(policy: Policy, delay_s: float = 30.0) -> Action:
    """The offload lane has no room for the request, or its tenant holds its share of the lane (its
    endpoint slow or down, or a tenant's flood: ``offload.admission``): back to RETRY untried, its
    attempts unchanged, so neither can fill memory or spend the retry budget.  ``delay_s``: shorter
    for a tenant admission keeps the next freed place for."""
    return Action(Verdict.RECONSUME, "the offload lane is full, or its tenant holds its share of it",
                  delay_s=min(delay_s, policy.max_delay_s), kind=Kind.LANE_FULL, counts=False)


def could_not_reconsume(action: Action, error: str) -> Action:
    """Publishing the RETRY copy failed for a reason no retry cures (not the broker's refusal, e.g. a
    delay the client cannot represent): the request goes to the DLQ with why, rather than loop."""
    return Action(Verdict.DLQ, f"could not reconsume ({error}); was: {action.reason}", kind=Kind.INTERNAL_ERROR)


def decide(request: PendingDeleteLedgerInfo, facts: Facts, policy: Policy) -> Action:
    if facts.transient is not None:
        return retry_later(facts.transient, facts.attempts, policy)
    if facts.internal_error is not None:
        return retry_later(facts.internal_error, facts.attempts, policy, kind=Kind.INTERNAL_ERROR)
    if facts.invalid is not None:
        return invalid(facts.invalid)
    if facts.unverifiable is not None:
        return Action(Verdict.DLQ, f"cannot verify: {facts.unverifiable}", kind=Kind.CANNOT_VERIFY)
    if facts.references:
        in_use = "; ".join(facts.references)
        return _in_use_grace(request, in_use, facts, policy) or Action(Verdict.ACK_IN_USE, in_use)
    if request.ledger_type == LedgerType.LEDGER:
        return _decide_bookkeeper(request, facts, policy)
    return _decide_offload(request, facts, policy)


def _decide_bookkeeper(request: PendingDeleteLedgerInfo, facts: Facts, policy: Policy) -> Action:
    bk = facts.bookkeeper
    assert bk is not None, "gathering always records a BookKeeper fact for LEDGER requests"
    if bk.unreadable is not None:
        return Action(Verdict.DLQ, f"BookKeeper metadata at {bk.path} unreadable: {bk.unreadable}",
                      kind=Kind.CANNOT_VERIFY)
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
        return Action(Verdict.DLQ, off.target_error, kind=Kind.OFFLOAD_TARGET_ERROR)
    if off.held_by is not None:  # a shared segment another listed ledger holds: its request deletes it
        return _in_use_grace(request, off.held_by, facts, policy) or Action(Verdict.ACK_IN_USE, off.held_by)
    if not off.present:
        return Action(Verdict.ACK_ABSENT, "offloaded objects already absent")
    if off.unverifiable is not None:
        # Unverifiable means not deleted: a name alone is all a forged request needs.
        return Action(Verdict.DLQ, f"cannot verify the offloaded copy: {off.unverifiable}", kind=Kind.CANNOT_VERIFY)
    young = _too_young(request, off.oldest_object_ms, facts, policy)
    if young is not None:
        return young
    return Action(Verdict.DELETE_OFFLOAD, off.verified or "verified")


def _in_use_grace(request: PendingDeleteLedgerInfo, in_use: str, facts: Facts, policy: Policy) -> Action | None:
    """A mark phase sends its requests, *then* removes the ledgers from the list in one write.

    A request consumed in between finds its ledger still listed; acking it as
    "in use" then would leave an orphan the moment the write lands.  So a
    trim/topic-deleted request is looked at again until the grace ends; past it,
    the ledger really is in use (the mark phase crashed or aborted).

    The grace runs from when *this daemon* first found the request in use
    (``grace_since_ms``, our own clock, carried on the RETRY copy), never from
    ``markedAt``: that is another host's clock, and a trim host behind ours by
    more than the grace would get no window at all.  First sight is never before
    the send, and trim writes within the grace of its first send (``trim.py``
    aborts otherwise), so the write always lands inside the window.  The claimed
    reason only buys a wait, never a deletion: a forged one (or a forged start)
    at worst acks a listed ledger as in use.  Bounded by time, not the retry budget."""
    if request.reason not in MARK_PHASE or policy.in_use_grace_s <= 0:
        return None
    since_ms = facts.grace_since_ms
    if since_ms is None or since_ms > facts.now_ms + CLOCK_SKEW_S * 1000:
        since_ms = facts.now_ms
    left_s = policy.in_use_grace_s - max((facts.now_ms - since_ms) / 1000, 0.0)
    if left_s <= 0:
        return None
    delay_s = min(left_s, max(policy.reconsume_later_s, 1.0))
    return Action(Verdict.RECONSUME, f"{in_use}; its mark phase may not have written yet (grace "
                  f"{policy.in_use_grace_s:g}s)", delay_s=delay_s, kind=Kind.IN_USE_GRACE, grace_since_ms=since_ms)


def _too_young(request: PendingDeleteLedgerInfo, created_ms: int | None, facts: Facts, policy: Policy) -> Action | None:
    """Pulsar creates every ledger before it records it (rollover, a cursor ledger, a schema version,
    a compaction, a bucket snapshot): a ledger created moments ago may simply not be recorded yet.

    Whatever the request's ``reason`` claims, a ledger younger than ``minLedgerAgeSeconds`` is
    deleted only when the metadata proves it can never be recorded again (``facts.superseded``,
    from the reference model: its owner already records a newer one, or is gone)."""
    if facts.superseded is not None:
        return None
    if created_ms is None:
        return Action(Verdict.DLQ, "cannot tell the ledger's age, and nothing proves it superseded",
                      kind=Kind.CANNOT_VERIFY)
    remaining_s = policy.min_ledger_age_s - (facts.now_ms - created_ms) / 1000
    if remaining_s <= 0:
        return None
    # Wait exactly until it is old enough: one retry instead of many (a ctime from a skewed
    # clock in the far future is capped by the policy's longest delay, not trusted).
    return _not_yet(f"ledger younger than minLedgerAgeSeconds ({policy.min_ledger_age_s:g}s)",
                    max(remaining_s, 1.0), facts, policy)


def _not_yet(why: str, delay_s: float, facts: Facts, policy: Policy, kind: Kind = Kind.NOT_YET) -> Action:
    if facts.attempts >= policy.max_retries:
        return Action(Verdict.DLQ, f"max retries ({policy.max_retries}) reached: {why}", kind=Kind.MAX_RETRIES,
                      cause=kind)
    return Action(Verdict.RECONSUME, why, delay_s=min(max(delay_s, 0.0), policy.max_delay_s), kind=kind)


def retry_later(error: str, attempts: int, policy: Policy, kind: Kind = Kind.TRANSIENT) -> Action:
    """A transient failure that in-process retries did not cure (or a bug, ``INTERNAL_ERROR``)."""
    return _not_yet(f"{'transient failure' if kind == Kind.TRANSIENT else 'internal error'}: {error}",
                    policy.reconsume_later_s, Facts(0, attempts), policy, kind=kind)


def settle_delete(action: Action, result: DeleteResult, attempts: int, policy: Policy) -> Action:
    """After a delete ran (or was skipped by a dry run): what becomes of the request."""
    assert action.verdict in (Verdict.DELETE_BOOKKEEPER, Verdict.DELETE_OFFLOAD)
    match result.status:
        case DeleteStatus.DELETED:
            return Action(action.verdict, f"deleted ({result.detail})" if result.detail else "deleted")
        case DeleteStatus.ABSENT:
            return Action(Verdict.ACK_ABSENT, "absent")
        case DeleteStatus.DRY_RUN:
            return Action(Verdict.DRY_RUN, f"dry run: would delete ({action.reason})")
        case DeleteStatus.BAD_VERSION:
            return retry_later("ledger metadata changed since it was verified", attempts, policy)
        case DeleteStatus.TRANSIENT:
            return retry_later(result.detail, attempts, policy)
        case DeleteStatus.CLAIMED:  # not tried: whoever holds the copy deletes it; this finds it absent
            return Action(Verdict.RECONSUME, result.detail, delay_s=min(CLAIMED_RETRY_S, policy.reconsume_later_s,
                                                                        policy.max_delay_s),
                          kind=Kind.TRANSIENT, counts=False)
        case DeleteStatus.FAILED:
            return Action(Verdict.DLQ, result.detail, kind=Kind.DELETE_FAILED)
        case _:
            assert_never(result.status)
