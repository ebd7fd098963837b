"""Seals on what this tool writes on its RETRY and DLQ copies, so that only what it wrote is believed.

Anyone who may produce to a deletion topic (in namespace scope, any tenant on its own RETRY and DLQ
topics) chooses a message's properties.  What a copy says about this tool's own work — why a request
waits (:mod:`.hold_reason`), how many tries it has had, why it was parked and what failed last — is
shown to operators or spends a request's retry budget, so it counts only under an HMAC-SHA256 that
this tool wrote: the key is the one ``dlq purge`` signs its markers with, kept in the metadata store,
which producers cannot read (:class:`deletion_service.dlq.marker.MarkerKey`).

Each thing sealed has a domain of its own (a MAC of one is never a MAC of another) and binds the
message body and, where the copy may be read elsewhere, the family of deletion topics it belongs to
(a copy moved into another namespace's RETRY or DLQ proves nothing there).  Fields are encoded with
their lengths, so no two different sets of values sign the same bytes.

``secret`` None means no key could be had: nothing is sealed and nothing is proven.  Each reader
says what an unproven value then reads as.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Self

from deletion_service.protocol.topics import family


class Seal:
    """The key copies are sealed with; ``secret`` None: there is none (nothing is sealed or proven)."""

    def __init__(self, secret: bytes | None) -> None:
        self._secret = secret

    @classmethod
    def sharing(cls, other: Seal | None) -> Self:
        """A seal of this kind under ``other``'s key (keyless when ``other`` is None)."""
        return cls(other._secret if other is not None else None)

    @property
    def usable(self) -> bool:
        return self._secret is not None

    def _hmac(self, text: bytes) -> str:
        assert self._secret is not None
        return hmac.new(self._secret, text, hashlib.sha256).hexdigest()

    def _proves(self, mac: object, text: bytes) -> bool:
        """Whether ``mac`` (a property's value: anyone's) is this key's MAC of ``text``.  Never raises."""
        if self._secret is None or not isinstance(mac, str) or not mac.isascii():
            return False
        return hmac.compare_digest(mac.encode("ascii"), self._hmac(text).encode("ascii"))


def fields(domain: bytes, *parts: str | bytes) -> bytes:
    """``domain``, then each part as its length and its bytes: no two lists of parts give the same text."""
    out = [domain]
    for part in parts:
        raw = part if isinstance(part, bytes) else part.encode("utf-8", "surrogatepass")
        out.append(b"%d:" % len(raw) + raw)
    return b"".join(out)


def digest(body: bytes) -> bytes:
    return hashlib.sha256(body).digest()


class AttemptsSeal(Seal):
    """Seals the retry count (``RECONSUMETIMES``) a RETRY copy carries, for its body and topic family.

    An unproven count reads 0: a producer on RETRY could otherwise spend a request's whole retry
    budget at once (a count of 4242 parks it on its first failure) and put that figure on ``dlq
    list``.  Without a key (``usable`` False) a count is taken as written, as before counts were
    sealed: reading every count as 0 would let a request that keeps failing retry for ever."""

    _DOMAIN = b"ledger-deletion retry attempts v1\n"

    def _text(self, count: str, topic: str, body: bytes) -> bytes:
        return fields(self._DOMAIN, family(topic), count, digest(body))

    def seal(self, count: int, topic: str, body: bytes) -> str | None:
        """The seal of ``count`` for a copy of ``body`` on ``topic``'s family (None without a key)."""
        return self._hmac(self._text(str(count), topic, body)) if self._secret is not None else None

    def proves(self, count: str, mac: object, topic: str, body: bytes) -> bool:
        """Whether this tool wrote the count ``count`` (as the property holds it) on a copy of ``body``."""
        return self._secret is not None and self._proves(mac, self._text(count, topic, body))


class ParkedSeal(Seal):
    """Seals why a DLQ copy was parked: its reason, last error and retry count, with its body (as stored)
    and its topic family.  ``dlq list`` and the admin API show those only for a copy that proves them."""

    _DOMAIN = b"ledger-deletion dlq copy v1\n"

    def _text(self, reason: str, last_error: str, attempts: str, topic: str, body: bytes) -> bytes:
        return fields(self._DOMAIN, family(topic), reason, last_error, attempts, digest(body))

    def seal(self, reason: str, last_error: str, attempts: int, topic: str, body: bytes) -> str | None:
        """The seal of a DLQ copy of ``body`` on ``topic``'s family (None without a key)."""
        if self._secret is None:
            return None
        return self._hmac(self._text(reason, last_error, str(attempts), topic, body))

    def proves(self, reason: object, last_error: object, attempts: object, mac: object, topic: str,
               body: bytes) -> bool:
        """Whether this tool parked ``body`` with these words (the properties' values: anyone's).  Never raises."""
        if not (isinstance(reason, str) and isinstance(last_error, str) and isinstance(attempts, str)):
            return False
        try:
            return self._proves(mac, self._text(reason, last_error, attempts, topic, body))
        except UnicodeError:
            return False
