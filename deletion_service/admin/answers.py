"""How a synchronous delete's :class:`SyncResult` becomes an HTTP status (the HTTP contract).

| outcome | status | why |
| --- | --- | --- |
| deleted, absent | 200 | absent is success: deletion is idempotent |
| would_delete (``run --dry-run``) | 200 | verified; the body says what a real run would delete |
| still_in_use | 409 | the ledger is referenced; it will not be deleted, do not retry |
| not_yet (OPEN / IN_RECOVERY ledger, or younger than ``minLedgerAgeSeconds``) | 409 + ``Retry-After`` | see below |
| metadata_mismatch | 422 | the request does not describe this ledger (forged or stale) |
| unavailable (metadata store, S3, broker, timeouts) | 503 + ``Retry-After`` | a dependency is down |
| failed (metadata unreadable, offload target error) | 502 | storage answered what we cannot act on: an operator looks |
| out_of_scope | 403 | a daemon restricted to its tenant's namespaces (``run --tenant``) was asked about another's |

Why an OPEN or young ledger is 409 and not 503: the service and its
dependencies worked and verified the ledger; it is the *ledger's state* that
conflicts with deleting it now (a writer still owns it, or it may not be
registered yet).  503 tells load balancers and health tooling that the service
is failing, which it is not.  The body's ``outcome`` (``not_yet`` vs
``still_in_use``) and ``Retry-After`` tell a script whether retrying can help.

``SyncResult`` already separates "not yet" from "a dependency failed", and the
synchronous path has no retry budget, so the mapping is a table.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from deletion_service.protocol.fate import SyncOutcome
from deletion_service.service import SyncResult

#: Seconds a client should wait after a 503: dependencies usually come back within seconds.
UNAVAILABLE_RETRY_AFTER_S = 10


class HttpOutcome(StrEnum):
    """The ``outcome`` field of every admin API response body."""

    OK = "ok"
    DELETED = "deleted"
    ABSENT = "absent"
    WOULD_DELETE = "would_delete"
    STILL_IN_USE = "still_in_use"
    NOT_YET = "not_yet"
    METADATA_MISMATCH = "metadata_mismatch"
    UNAVAILABLE = "unavailable"
    FAILED = "failed"
    INVALID = "invalid"
    UNAUTHORIZED = "unauthorized"
    TOO_LARGE = "too_large"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    OUT_OF_SCOPE = "out_of_scope"
    ERROR = "error"


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    outcome: HttpOutcome
    reason: str
    retry_after_s: int | None = None

    def headers(self) -> dict[str, str]:
        return {} if self.retry_after_s is None else {"Retry-After": str(self.retry_after_s)}


_DIRECT = {
    SyncOutcome.DELETED: (200, HttpOutcome.DELETED),
    SyncOutcome.ABSENT: (200, HttpOutcome.ABSENT),
    SyncOutcome.WOULD_DELETE: (200, HttpOutcome.WOULD_DELETE),
    SyncOutcome.STILL_IN_USE: (409, HttpOutcome.STILL_IN_USE),
    SyncOutcome.METADATA_MISMATCH: (422, HttpOutcome.METADATA_MISMATCH),
    SyncOutcome.FAILED: (502, HttpOutcome.FAILED),
    SyncOutcome.OUT_OF_SCOPE: (403, HttpOutcome.OUT_OF_SCOPE),
}


def http_answer(result: SyncResult, not_yet_retry_after_s: float) -> HttpAnswer:
    """``not_yet_retry_after_s``: when to ask again about an OPEN ledger (the consumer's
    ``twoPhaseDeletionReconsumeLaterInSeconds``); a young ledger says exactly when itself."""
    if result.outcome in _DIRECT:
        status, outcome = _DIRECT[result.outcome]
        return HttpAnswer(status, outcome, result.reason)
    if result.outcome == SyncOutcome.UNAVAILABLE:
        return HttpAnswer(503, HttpOutcome.UNAVAILABLE, result.reason, UNAVAILABLE_RETRY_AFTER_S)
    if result.outcome == SyncOutcome.NOT_YET:
        wait = result.retry_after_s if result.retry_after_s is not None else not_yet_retry_after_s
        return HttpAnswer(409, HttpOutcome.NOT_YET, result.reason, max(1, round(wait)))
    return HttpAnswer(500, HttpOutcome.ERROR, f"unexpected outcome {result.outcome!r}: {result.reason}")
