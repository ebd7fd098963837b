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
read).  A label without a valid seal reads as ``unknown``, and its words are not shown.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from deletion_service.delete_phase.rules.decision import Kind
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
    if not counts:
        return HoldReason.OUTAGE
    return HoldReason.RETRY_DELAY


def label_of(properties: Mapping[str, str]) -> dict[str, str]:
    """A copy's label as it is, for a copy handed back to RETRY with its body unchanged (so its seal,
    if any, still holds; whoever reads it checks it)."""
    return {k: properties[k] for k in (HELD_FOR, HELD_WHY, HELD_SEAL) if k in properties}


class HoldSeal:
    """Seals the hold label this daemon writes on a RETRY copy, and reads back only sealed ones.
    ``secret`` None (no key could be had): nothing is sealed, every label reads ``unknown``."""

    def __init__(self, secret: bytes | None) -> None:
        self._secret = secret

    def _mac(self, reason: str, why: str, body: bytes) -> str:
        assert self._secret is not None
        text = _DOMAIN + reason.encode() + b"\n" + why.encode("utf-8", "surrogatepass") + b"\n" \
            + hashlib.sha256(body).digest()
        return hmac.new(self._secret, text, hashlib.sha256).hexdigest()

    def label(self, reason: HoldReason, why: str, body: bytes) -> dict[str, str]:
        """The properties a RETRY copy carries to say why it waits (none without a key)."""
        if self._secret is None:
            return {}
        return {HELD_FOR: reason.value, HELD_WHY: why, HELD_SEAL: self._mac(reason.value, why, body)}

    def read(self, properties: Mapping[str, str], body: bytes) -> tuple[HoldReason, str]:
        """The reason and words a RETRY copy carries, if this tool sealed them for this body; else
        (``unknown``, "")."""
        reason, why, seal = (properties.get(k) for k in (HELD_FOR, HELD_WHY, HELD_SEAL))
        if self._secret is None or reason is None or why is None or seal is None:
            return HoldReason.UNKNOWN, ""
        try:
            valid = hmac.compare_digest(seal.encode("ascii"), self._mac(reason, why, body).encode())
            return (HoldReason(reason), why) if valid else (HoldReason.UNKNOWN, "")
        except (UnicodeError, ValueError):
            return HoldReason.UNKNOWN, ""
