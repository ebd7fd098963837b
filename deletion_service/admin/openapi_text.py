"""What the OpenAPI document says about each admin route: summaries, descriptions, documented answers.

Kept apart from ``app.py`` so the routes read as code and this text reads as
the contract operators see in ``deploy/openapi.json``.  Nothing here changes
how a request is handled: each route's behaviour (its response model, its
security dependency) stays beside its handler, and each dict below is only
spread into that route's decorator.  Editing this file changes the committed
document, so run ``python scripts/gen_openapi.py`` afterwards.
"""

from __future__ import annotations

from typing import Any

from deletion_service.admin.schemas import REF, Answer, ReadyAnswer

DESCRIPTION = """\
Admin API of the `ledger-deletion` daemon (Apache Pulsar PIP-186 two-phase ledger deletion).

* Reads (`GET`) need no credentials.
* `POST /admin/v2/ledger-deletion/delete` needs `Authorization: Bearer <token>` when the daemon has an admin
  token (`adminTokenFile` or `LEDGER_DELETION_ADMIN_TOKEN`); the daemon refuses to listen on a non-loopback
  address without one.
* Every answer that is not data is `{"outcome": ..., "reason": ...}`.
"""

TAGS: list[dict[str, str]] = [
    {"name": "health", "description": "liveness, readiness, metrics"},
    {"name": "broker-stats", "description": "PIP-186's in-flight estimate"},
    {"name": "ledger-deletion", "description": "synchronous deletion and the DLQ"},
]

BEARER_DESCRIPTION = ("the daemon's admin token (`adminTokenFile` / `LEDGER_DELETION_ADMIN_TOKEN`); "
                      "required for mutations when configured")

RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before asking again", "schema": {"type": "integer"}}}
RETRY_AFTER_REQUIRED = {"Retry-After": {**RETRY_AFTER["Retry-After"], "required": True}}


def documented_answer(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    """One documented error status: an ``Answer`` body (outcome, reason), with the headers it carries."""
    out: dict[str, Any] = {"model": Answer, "description": description}
    if headers:
        out["headers"] = headers
    return out


HEALTHZ: dict[str, Any] = {
    "tags": ["health"],
    "summary": "Liveness: the process can do its work",
    "description": "200 while the process runs and looks after its embedded broker; 503 once that broker "
                   "died and could not be restarted (the daemon is then exiting, for its supervisor to restart "
                   "it). Checks no external dependency: that is `/readyz`.",
    "responses": {503: {"model": Answer, "description": "the embedded broker is gone for good; `reason` says why"}},
}

READYZ: dict[str, Any] = {
    "tags": ["health"],
    "summary": "Readiness: metadata store and broker reachable",
    "description": "Probes each metadata store (a read of its root) and the broker (a TCP connection) "
                   "with a deadline of a few seconds. 503 names the component that is down.",
    "responses": {503: {"model": ReadyAnswer, "description": "a dependency is unreachable; `checks` says which"}},
}

METRICS: dict[str, Any] = {
    "tags": ["health"],
    "summary": "Prometheus metrics",
    "description": "Prometheus text exposition of the deletion metrics (`pulsar_ledger_deletion_*`) and the "
                   "cursor core's (`pulsar_cursor_*`).",
    "responses": {200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                        "description": "Prometheus text format 0.0.4"}},
}

INFLIGHT: dict[str, Any] = {
    "tags": ["broker-stats"],
    "summary": "Estimated in-flight deletions (PIP-186)",
    "description": "Requests in flight: the requests on every request partition and RETRY topic that "
                   "subscription `ledger-deletion` has not acknowledged, as the broker counts its backlog, summed "
                   "and read fresh from the broker — the figure `ledger-deletion inflight` and the "
                   "`estimated_inflight` gauge give (one function computes all three). A bare JSON integer. From "
                   "the brokers' admin REST (`msgBacklog`) with `--web-service-url`, else from a broker's "
                   "`/metrics` (`pulsar_subscription_back_log`: `brokerMetricsUrl`, or the embedded broker's; "
                   "pulsar-lite also counts requests acknowledged after the oldest one that is not, and refreshes "
                   "every ~10 s, so it lags).",
    "responses": {200: {"description": "a bare JSON integer", "content": {"application/json": {
                      "schema": {"type": "integer", "minimum": 0}, "example": 42}}},
                  400: documented_answer("`namespace` is not TENANT/NAMESPACE"),
                  503: documented_answer("broker statistics unavailable", RETRY_AFTER_REQUIRED)},
}

DLQ: dict[str, Any] = {
    "tags": ["ledger-deletion"],
    "summary": "List the dead-letter queue (without acknowledging)",
    "description": "The requests parked in the DLQ, oldest first, read with a reader (no subscription): "
                   "listing acknowledges nothing and holds nothing back, so concurrent listings (and "
                   "`ledger-deletion dlq list`) all see every parked request. `messageId` is `LEDGER:ENTRY`, "
                   "as `dlq purge` and `dlq requeue` take it.",
    "responses": {400: documented_answer("`limit` is not an integer in range, `namespace` not TENANT/NAMESPACE, "
                                        "or `reason` not a reason a request is ever parked for"),
                  503: documented_answer("the broker is unreachable", RETRY_AFTER_REQUIRED)},
}

DELETE: dict[str, Any] = {
    "tags": ["ledger-deletion"],
    "summary": "Verify and delete one ledger now (synchronous)",
    "description": "Runs the delete phase's decision and actions for one request, as the consumer would, and "
                   "answers with how it ended instead of acknowledging a message. A ledger younger than "
                   "`minLedgerAgeSeconds` is not deleted yet, unless the metadata proves it superseded. "
                   "Idempotent: a ledger already gone answers 200 `absent`.",
    # The body is read and checked by hand (400, not FastAPI's 422), so its schema is attached here.
    "openapi_extra": {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": REF.format(model="DeleteLedgerPayload")}}}}},
    "responses": {
        200: {"description": "`deleted`, or `absent` (already gone: success)"},
        400: documented_answer("`invalid`: not JSON, or not a deletion request (the reason names the field)"),
        401: documented_answer("`unauthorized`: a token is configured and the bearer token is missing or wrong",
                               {"WWW-Authenticate": {"schema": {"type": "string"}, "required": True}}),
        403: documented_answer("`out_of_scope`: this daemon is restricted to its own namespaces (`run --tenant`/"
                               "`--namespace`) and the topic is in another; nothing verified or deleted"),
        409: documented_answer("`still_in_use`: referenced, never deleted (do not retry); or `not_yet`: the "
                               "ledger is OPEN/IN_RECOVERY or younger than `minLedgerAgeSeconds` (retry after "
                               "`Retry-After`)", RETRY_AFTER),
        413: documented_answer("`too_large`: body over the size limit (64 KiB)"),
        415: documented_answer("`unsupported_media_type`: the body must be `application/json`"),
        422: documented_answer("`metadata_mismatch`: the ledger's BookKeeper metadata (or the offload target) "
                               "does not belong to the named topic/component; nothing deleted"),
        500: documented_answer("`error`: an unexpected error; details in the daemon's log"),
        502: documented_answer("`failed`: storage could not be verified or refused the deletion (unreadable "
                               "metadata, offload target error); an operator must look"),
        503: documented_answer("`unavailable`: a dependency (metadata store, tiered storage, broker) is down; "
                               "nothing deleted", RETRY_AFTER_REQUIRED),
    },
}
