"""Claims on offloaded copies: of all the daemons holding a request for one copy, one deletes it.

Why a claim: a BookKeeper znode is deleted at the version that was verified, so
of two replicas holding duplicate requests (a redelivery, a trim re-run,
``scan-orphans --enqueue`` twice) one deletes it and the other finds it gone.
Object stores have no conditional delete: the offloader HEADs each object (to
tell "deleted" from "absent") and then deletes the present ones, so two daemons
(or two threads of one) could both see the objects present, both delete them, and
both record ``deleted`` with their sizes: one copy counted twice.

So the delete of a copy's objects runs under a claim in the metadata store,
the one truth every replica shares: a node of ours (under :data:`CLAIMS_ROOT`,
never a Pulsar or BookKeeper node) named after the copy (:func:`claim_name`:
its uuid(s) and ledger id), holding ``{owner, expiresAt}``.

* **Take**: create the node.  It exists and has not expired: another daemon is
  deleting this copy now, and the caller defers the request (untried); when it
  comes back, the objects are gone and it records ``absent``.  It exists and
  has expired (its owner died): taken over with a put at the version read, so
  of two daemons taking it over only one wins.  A claim of this very process
  that it does not hold in memory (a create whose reply was lost) is taken
  over at once.
* **Renew** just before the objects are deleted: a put at our version, so
  nobody took it over since it was taken (a pause longer than the claim's life)
  and nobody can for another :data:`CLAIM_TTL_S`, which outlasts a delete's
  in-process tries (a few calls of seconds each).  Lost: nothing is deleted.
* **Release** once the delete's outcome is known: removed at our version.

**Two clocks.** A claim's expiry is written with its owner's clock and judged with the taker's.
So a claim counts as expired only :data:`MAX_CLOCK_SKEW_S` after the time it names: a replica
whose clock runs ahead of the owner's by up to that much still sees a live claim as live (with a
60 s claim, a replica 61 s ahead took over a claim whose owner was deleting, and both deleted and
recorded the copy).  Keep the replicas' clocks within it (the same margin the in-use grace
assumes, docs/design/safety.md); a claim whose owner died is then taken over after its life plus
that margin.

Threads of one process are kept apart in memory first (:class:`OffloadClaims`
holds the names it has claimed), so two lane threads never both hold one copy.

A crash between any two steps loses nothing and deletes nothing twice:

* after the take, before the delete: the claim stays until it expires; the
  request, unacked, is redelivered, deferred until then, and deleted by
  whoever takes the claim over;
* after the delete, before its outcome is recorded (or the claim released):
  the objects are gone and nobody recorded ``deleted``; the redelivered
  request finds them absent (the same caveat as a lost delete reply);
* after the record, before the release: the claim outlives its owner until
  it expires; a request for the copy finds the objects absent before it ever
  looks at the claim.  Nothing would ever take that claim again, so every
  daemon removes expired claims (at the version it read) now and then
  (:meth:`OffloadClaims.sweep`, at most once per claim life, when it takes one).

Releasing once the outcome is *known* rather than once it is *recorded* is
enough: whoever takes the claim next HEADs the objects under it, and finds
absent what the first owner deleted, whenever that owner writes its record.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from metastore.interface import ABSENT, BadVersionError, MetadataStore, NodeExistsError, NoNodeError
from offloaders.interface import OffloadTarget

_log = logging.getLogger(__name__)

#: Where the claims live: a path of this tool's own, beside its DLQ marker key.
CLAIMS_ROOT = "/ledger-deletion/offload-claims"
#: Expired claims one sweep removes at most (a sweep runs inside a delete: kept short).
SWEEP_LIMIT = 100
#: How long a claim holds without a renewal: longer than a copy's delete with its in-process tries
#: (three tries of calls with a 2 s connect and a 5 s read timeout), short enough that a copy whose
#: deleter died waits only this long for a sibling.
CLAIM_TTL_S = 60.0
#: How far apart two replicas' clocks may be (the in-use grace assumes the same): a claim expires only
#: this long after the time its owner wrote in it.
MAX_CLOCK_SKEW_S = 150.0


def claim_name(target: OffloadTarget) -> str:
    """The claim's node name: the copy's identity, whatever endpoint or bucket spelling a request carries.

    A per-ledger copy: its data object's name (``<uuid>-ledger-<id>``).  A copy with streaming
    segments: the ledger id and a digest of every uuid it names."""
    if not target.segments:
        return f"{target.uuid}-ledger-{target.ledger_id}"
    named: set[str] = {seg.uuid for seg in target.segments}
    if target.has_ledger_uuid:
        named.add(target.uuid)
    uuids = sorted(named)
    return f"{target.ledger_id}-segments-{hashlib.sha256(chr(10).join(uuids).encode()).hexdigest()[:32]}"


class Busy(StrEnum):
    """Why a claim was not taken."""

    HERE = "this daemon is deleting this offloaded copy now (another request for it)"
    ELSEWHERE = "another daemon is deleting this offloaded copy now"


@dataclass(frozen=True)
class Claim:
    """A claim this process holds on one copy (its node's version is kept by :class:`OffloadClaims`)."""

    name: str
    path: str


class OffloadClaims:
    """Take, renew and release claims on offloaded copies in ``store`` (see the module's docstring).

    Raises the store's errors (``MetadataStoreError``) from :meth:`take` and :meth:`renew`: the
    caller deletes nothing then.  :meth:`release` never raises: an unreleased claim expires."""

    def __init__(self, store: MetadataStore, ttl_s: float = CLAIM_TTL_S,
                 clock: Callable[[], float] = time.time, owner: str | None = None) -> None:
        self.store, self.ttl_s, self.clock = store, ttl_s, clock
        #: who holds a claim, for an operator reading the node; unique to this process
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        #: claim name -> the version of its node we wrote (-1 while it is being taken)
        self._mine: dict[str, int] = {}
        self._lock = threading.Lock()
        self._next_sweep = clock()

    def take(self, target: OffloadTarget) -> Claim | Busy:
        name = claim_name(target)
        with self._lock:
            if name in self._mine:
                return Busy.HERE
            self._mine[name] = -1
        claim = Claim(name, f"{CLAIMS_ROOT}/{name}")
        try:
            version = self._take(claim.path)
        except BaseException:
            self._forget(name)
            raise
        if version is None:
            self._forget(name)
            return Busy.ELSEWHERE
        self._set(name, version)
        if self._sweep_due():
            self.sweep()
        return claim

    def sweep(self) -> int:
        """Remove claims expired (their owners died between delete and release), each at the version read,
        so one taken over meanwhile stays.  Returns how many were removed; never raises."""
        removed = 0
        try:
            for name in self.store.children(CLAIMS_ROOT)[:SWEEP_LIMIT]:
                path = f"{CLAIMS_ROOT}/{name}"
                node = self.store.get(path)
                if node is None or not self._expired(_parse(node.data, node.ctime_ms + int(self.ttl_s * 1000))[1]):
                    continue
                try:
                    self.store.delete(path, node.version)
                    removed += 1
                except (BadVersionError, NoNodeError):
                    pass  # taken over or released meanwhile: not ours to remove
        except Exception as e:  # noqa: BLE001 - a leftover claim costs a node, never a deletion
            _log.info("sweeping expired offload claims failed (%s): tried again later", e)
        return removed

    def _sweep_due(self) -> bool:
        with self._lock:
            if self.clock() < self._next_sweep:
                return False
            self._next_sweep = self.clock() + self.ttl_s
            return True

    def renew(self, claim: Claim) -> bool:
        """Our claim is good for another ``ttl_s``; False if it was taken over (or removed) meanwhile."""
        try:
            self._set(claim.name, self.store.put(claim.path, self._body(), self._version(claim)))
        except (BadVersionError, NoNodeError):
            _log.warning("the claim on offloaded copy %s was taken over while this daemon held it (a pause "
                         "longer than %.0f s): not deleting it", claim.name, self.ttl_s)
            return False
        return True

    def release(self, claim: Claim) -> None:
        try:
            self.store.delete(claim.path, self._version(claim))
        except NoNodeError:
            pass
        except BadVersionError:
            _log.warning("the claim on offloaded copy %s was taken over before this daemon released it",
                         claim.name)
        except Exception as e:  # noqa: BLE001 - an unreleased claim expires; the outcome stands
            _log.warning("could not release the claim on offloaded copy %s (%s): it expires in %.0f s",
                         claim.name, e, self.ttl_s)
        finally:
            self._forget(claim.name)

    def _take(self, path: str) -> int | None:
        """The version of the claim node we wrote; ``None``: another daemon holds it."""
        for _ in range(3):  # created, or released and re-created, by others in between: look again
            try:
                return self.store.put(path, self._body(), ABSENT)
            except NodeExistsError:
                pass
            node = self.store.get(path)
            if node is None:
                continue  # released meanwhile: try to create it again
            owner, expires_ms = _parse(node.data, node.ctime_ms + int(self.ttl_s * 1000))
            if owner != self.owner and not self._expired(expires_ms):
                return None
            try:  # expired (its owner died), or ours from a create whose reply was lost
                return self.store.put(path, self._body(), node.version)
            except (BadVersionError, NoNodeError):
                continue  # another daemon took it over (or released it) first: look again
        return None

    def _expired(self, expires_ms: int) -> bool:
        """Whether a claim that names ``expires_ms`` (its owner's clock) has certainly expired by ours."""
        return expires_ms + MAX_CLOCK_SKEW_S * 1000 < self.clock() * 1000

    def _body(self) -> bytes:
        expires_ms = int((self.clock() + self.ttl_s) * 1000)
        return json.dumps({"owner": self.owner, "expiresAt": expires_ms}, separators=(",", ":")).encode()

    def _version(self, claim: Claim) -> int:
        with self._lock:
            return self._mine[claim.name]

    def _set(self, name: str, version: int) -> None:
        with self._lock:
            self._mine[name] = version

    def _forget(self, name: str) -> None:
        with self._lock:
            self._mine.pop(name, None)


def _parse(data: bytes, fallback_expires_ms: int) -> tuple[str | None, int]:
    """A claim's owner and expiry; a body we cannot read expires ``ttl`` after the node was created."""
    try:
        body = json.loads(data)
        owner, expires = body["owner"], body["expiresAt"]
        if isinstance(owner, str) and isinstance(expires, int) and not isinstance(expires, bool):
            return owner, expires
    except (ValueError, KeyError, TypeError):
        pass
    return None, fallback_expires_ms
