"""Why a request waits in RETRY, written on its RETRY copy and read back wherever it is held.

A held request looks exactly like a stuck one unless something says why it
waits: an operator (``status``), the summary line and the ``held`` gauge (and
so the "stuck" alert) all group held requests by this reason.  The reason is
the decision's own (:class:`~.decision.Kind`, and whether the try counted),
written by :func:`~.dispose.retry_copy` as the ``ledgerDeletionHeldFor``
property; a copy made before this property existed reads as ``unknown``.
It is a label for people and alerts only: nothing is decided by it.
"""

from __future__ import annotations

from collections.abc import Mapping

from deletion_service.delete_phase.rules.decision import Kind
from deletion_service.protocol.fate import HoldReason

#: The RETRY copy's property naming why it waits (ours: never carried over from a request).
HELD_FOR = "ledgerDeletionHeldFor"
#: The decision's words for it (e.g. "ledger younger than minLedgerAgeSeconds (86400s)").
HELD_WHY = "ledgerDeletionHeldWhy"


def of_decision(kind: Kind, counts: bool) -> HoldReason:
    """The reason a RECONSUME decision makes a request wait."""
    if kind == Kind.NOT_YET:
        return HoldReason.NOT_YET
    if kind == Kind.IN_USE_GRACE:
        return HoldReason.GRACE
    if not counts:
        return HoldReason.OUTAGE
    return HoldReason.RETRY_DELAY


def of_properties(properties: Mapping[str, str]) -> HoldReason:
    """The reason written on a RETRY copy (``unknown`` when absent or not one of ours)."""
    try:
        return HoldReason(properties.get(HELD_FOR, ""))
    except ValueError:
        return HoldReason.UNKNOWN
