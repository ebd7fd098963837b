"""The words for a request's fate that every surface shares: how it ended (:class:`Outcome`, and
:class:`SyncOutcome` for a synchronous delete), how one storage delete went (:class:`DeleteStatus`)
and why a request waits on RETRY (:class:`HoldReason`).

They live here, below the delete phase, because the metrics, the audit trail, the admin API and the
CLI all name them: none of those may depend on how the delete phase decides.  What each verdict
becomes outside is mapped in :mod:`deletion_service.delete_phase.rules.outward` (the glossary in
``docs/glossary.md`` is generated from it).
"""

from __future__ import annotations

from enum import StrEnum


class HoldReason(StrEnum):
    NOT_YET = "not-yet"  # too young (minLedgerAgeSeconds), or the ledger is still open / in recovery
    GRACE = "in-use-grace"  # still listed; its mark phase may not have written yet
    OUTAGE = "outage"  # deferred while a dependency was down (no try counted)
    LANE_FULL = "offload-lane"  # deferred untried: the offload lane was full, or its tenant held its share
    RETRY_DELAY = "retry-delay"  # a try failed; the next one after reconsumeLaterInSeconds
    UNKNOWN = "unknown"  # a copy this tool did not label (an older copy, or a label it did not seal)

    @property
    def label(self) -> str:
        """For people: what the wait is, in a few words."""
        return _LABELS[self]


_LABELS = {
    HoldReason.NOT_YET: "not yet: too young (minLedgerAgeSeconds) or still open",
    HoldReason.GRACE: "in-use grace: still listed, its mark phase may not have written yet",
    HoldReason.OUTAGE: "deferred through a dependency outage",
    HoldReason.LANE_FULL: "waiting for room in the offload lane (full, or its tenant holds its share)",
    HoldReason.RETRY_DELAY: "retry delay after a failed try",
    HoldReason.UNKNOWN: "reason not recorded by this tool (an older copy, or written by a producer)",
}


class DeleteStatus(StrEnum):
    DELETED = "deleted"
    ABSENT = "absent"  # already gone: success
    BAD_VERSION = "bad_version"  # the ledger changed since it was verified: verify again later
    TRANSIENT = "transient"  # storage did not answer usefully this time
    CLAIMED = "claimed"  # an offloaded copy another daemon (or thread) is deleting now: untried, look again
    FAILED = "failed"  # a permanent failure an operator must see
    DRY_RUN = "dry_run"  # nothing was done on purpose


class Outcome(StrEnum):
    """How a request ended, as counted in ``…_acked_total{outcome}`` and written to the audit trail."""

    DELETED = "deleted"
    ABSENT = "absent"
    STILL_IN_USE = "still_in_use"
    METADATA_MISMATCH = "metadata_mismatch"
    RECONSUMED = "reconsumed"
    DLQ = "dlq"
    WOULD_DELETE = "would_delete"  # dry run: verified, nothing deleted


class SyncOutcome(StrEnum):
    """How a synchronous delete ended (``admin/answers.py`` maps each to an HTTP status)."""

    DELETED = "deleted"
    ABSENT = "absent"
    WOULD_DELETE = "would_delete"  # dry run: verified, nothing deleted
    STILL_IN_USE = "still_in_use"
    METADATA_MISMATCH = "metadata_mismatch"
    NOT_YET = "not_yet"  # OPEN / IN_RECOVERY, or too young: ask again after retry_after_s
    UNAVAILABLE = "unavailable"  # a dependency failed: metadata store, S3, broker
    FAILED = "failed"  # cannot verify, invalid, or a permanent storage error an operator must look at
    OUT_OF_SCOPE = "out_of_scope"  # a daemon restricted to some namespaces was asked about another's ledger
