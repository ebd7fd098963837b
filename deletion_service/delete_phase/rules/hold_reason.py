"""Why a request waits in RETRY, written on its RETRY copy and read back wherever it is held.

A held request looks exactly like a stuck one unless something says why it
waits: an operator (``status``), the summary line and the ``held`` gauge (and
so the "stuck" alert) all group held requests by this reason.  The reason is
the decision's own (:class:`~.decision.Kind`, and whether the try counted),
written by :func:`~.dispose.retry_copy` as the ``ledgerDeletionHeldFor``
property; a copy made before this property existed reads as ``unknown``.
It is a label for people and alerts only: nothing is decided by it.

But it is shown to people, so it must be ours.  Anyone who may produce to RETRY (in namespace
scope, any tenant on its own RETRY topic) chooses a message's properties: a forged
``ledgerDeletionHeldFor: outage`` with a ``ledgerDeletionHeldWhy`` of the producer's choosing would
put "held through a dependency outage" and any words on ``status`` and the ``held`` gauge.  So the
label is sealed (:class:`HoldSeal`): an HMAC over the reason, the words and the message body, under
the key ``dlq purge`` signs its markers with (kept in the metadata store, which producers cannot
read).  A label without a valid seal reads as ``unknown``, and its words are not shown.  The
same key seals a copy's retry count and a DLQ copy's words (:mod:`.seal`), each in a domain of its
own: this label's MAC is unchanged from the first sealed version, so labels written by an older
daemon still read back during a rolling upgrade, and the count's seal is a property of its own that an
older daemon ignores.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from deletion_service.delete_phase.rules.decision import Kind
from deletion_service.delete_phase.rules.seal import Seal
from deletion_service.protocol.fate import HoldReason

#: The RETRY copy's property naming why it waits (ours: never carried over from a request).
HELD_FOR = "ledgerDeletionHeldFor"
#: The decision's words for it (e.g. "ledger younger than minLedgerAgeSeconds (86400s)").
HELD_WHY = "ledgerDeletionHeldWhy"
#: The seal over both and the body (:class:`HoldSeal`).
HELD_SEAL = "ledgerDeletionHeldSeal"
_DOMAIN = b"ledger-deletion hold label v1\n"


def of_decision(kind: Kind, counts: bool) -> HoldReason:
    """The reason a RECONSUME decision makes a request wait."""
    if kind == Kind.NOT_YET:
        return HoldReason.NOT_YET
    if kind == Kind.IN_USE_GRACE:
        return HoldReason.GRACE
    if kind == Kind.LANE_FULL:
        return HoldReason.LANE_FULL
    if not counts:
        return HoldReason.OUTAGE
    return HoldReason.RETRY_DELAY


def label_of(properties: Mapping[str, str]) -> dict[str, str]:
    """A copy's label as it is, for a copy handed back to RETRY with its body unchanged (so its seal,
    if any, still holds; whoever reads it checks it)."""
    return {k: properties[k] for k in (HELD_FOR, HELD_WHY, HELD_SEAL) if k in properties}


class HoldSeal(Seal):
    """Seals the hold label this daemon writes on a RETRY copy, and reads back only sealed ones.
    ``secret`` None (no key could be had): nothing is sealed, every label reads ``unknown``."""

    @staticmethod
    def _text(reason: str, why: str, body: bytes) -> bytes:
        return _DOMAIN + reason.encode() + b"\n" + why.encode("utf-8", "surrogatepass") + b"\n" \
            + hashlib.sha256(body).digest()

    def label(self, reason: HoldReason, why: str, body: bytes) -> dict[str, str]:
        """The properties a RETRY copy carries to say why it waits (none without a key)."""
        if self._secret is None:
            return {}
        return {HELD_FOR: reason.value, HELD_WHY: why, HELD_SEAL: self._hmac(self._text(reason.value, why, body))}

    def read(self, properties: Mapping[str, str], body: bytes) -> tuple[HoldReason, str]:
        """The reason and words a RETRY copy carries, if this tool sealed them for this body; else
        (``unknown``, "")."""
        reason, why, seal = (properties.get(k) for k in (HELD_FOR, HELD_WHY, HELD_SEAL))
        if self._secret is None or reason is None or why is None or seal is None:
            return HoldReason.UNKNOWN, ""
        try:
            valid = self._proves(seal, self._text(reason, why, body))
            return (HoldReason(reason), why) if valid else (HoldReason.UNKNOWN, "")
        except (UnicodeError, ValueError):
            return HoldReason.UNKNOWN, ""
