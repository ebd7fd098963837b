"""One mapping from a settled :class:`~.decision.Action` to every form it takes outside.

A decision leaves the delete phase in several shapes: the ``outcome`` label of
``…_acked_total`` and of the audit trail, the synchronous answer the admin API
turns into an HTTP status (``admin/answers.py``, the HTTP contract over
:class:`SyncOutcome`), the DLQ copy's ``reason`` property and the log level an
operator filters on.  Three hand-written mappings of the same verdicts once
drifted apart (a dry run answered 502 while the consumer counted it
``would_delete``), so every one of those forms is read from one row here, and
the checker sees that every verdict has its row (``assert_never``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import assert_never

from deletion_service.delete_phase.rules.decision import Action, Kind, Verdict
from deletion_service.protocol.fate import Outcome, SyncOutcome

#: The DLQ copy's ``reason`` when the action names no kind (never expected; kept readable if it happens).
UNKNOWN_DLQ_REASON = "failed"


@dataclass(frozen=True)
class Outward:
    """Every outward form of one settled action."""

    outcome: Outcome
    sync: SyncOutcome
    #: the DLQ copy's ``reason`` property (only a DLQ verdict has one)
    dlq_reason: str | None = None
    log_level: int = logging.INFO

    @property
    def final(self) -> bool:
        """The request's question is answered for good (deleted, absent, in use, mismatch): no retry,
        no operator.  The audit trail records a synchronous delete only then."""
        return self.outcome in (Outcome.DELETED, Outcome.ABSENT, Outcome.STILL_IN_USE, Outcome.METADATA_MISMATCH)


def outward(action: Action) -> Outward:
    """The one row for ``action``'s verdict (a reconsume splits on why: a dependency, or the ledger's state).
    Each row depends on the verdict and the kind only: worked out once per pair (the disposer asks
    twice per message), from :func:`_row`."""
    key = (action.verdict, action.kind)
    row = _ROWS.get(key)
    if row is None:
        row = _ROWS[key] = _row(*key)
    return row


#: (verdict, kind) -> its row, filled as pairs are met (each value a pure function of its key).
_ROWS: dict[tuple[Verdict, Kind], Outward] = {}


def _row(verdict: Verdict, kind: Kind) -> Outward:
    match verdict:
        case Verdict.DELETE_BOOKKEEPER | Verdict.DELETE_OFFLOAD:
            return Outward(Outcome.DELETED, SyncOutcome.DELETED)
        case Verdict.ACK_ABSENT:
            return Outward(Outcome.ABSENT, SyncOutcome.ABSENT)
        case Verdict.ACK_IN_USE:
            return Outward(Outcome.STILL_IN_USE, SyncOutcome.STILL_IN_USE)
        case Verdict.ACK_MISMATCH:
            return Outward(Outcome.METADATA_MISMATCH, SyncOutcome.METADATA_MISMATCH, log_level=logging.WARNING)
        case Verdict.RECONSUME if kind in (Kind.TRANSIENT, Kind.INTERNAL_ERROR, Kind.LANE_FULL):
            return Outward(Outcome.RECONSUMED, SyncOutcome.UNAVAILABLE)
        case Verdict.RECONSUME:
            return Outward(Outcome.RECONSUMED, SyncOutcome.NOT_YET)
        case Verdict.DLQ:
            return Outward(Outcome.DLQ, SyncOutcome.FAILED, dlq_reason=kind.value or UNKNOWN_DLQ_REASON,
                           log_level=logging.WARNING)
        case Verdict.DRY_RUN:
            return Outward(Outcome.WOULD_DELETE, SyncOutcome.WOULD_DELETE)
        case _:
            assert_never(verdict)


def outcome_of(action: Action) -> Outcome:
    """The ``outcome`` label of a settled action (metrics, audit trail, logs)."""
    return outward(action).outcome
