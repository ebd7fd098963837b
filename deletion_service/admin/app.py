"""The admin HTTP API (see "HTTP contract" in the design): health, metrics, in-flight, DLQ, delete.

Built with FastAPI so the OpenAPI document comes from this code
(``scripts/gen_openapi.py`` writes ``deploy/openapi.json`` from it; a test
keeps the two equal).  Reads are open; the one mutation, ``POST …/delete``,
needs ``Authorization: Bearer <token>`` when a token is configured, and a
``Content-Type: application/json`` body (which a browser cannot send cross-site
without a CORS preflight we never answer: a web page cannot make a loopback
daemon delete ledgers).  Every error answer is a small JSON object with
``outcome`` and ``reason``; tracebacks and secrets stay out of answers and logs.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
from decimal import Decimal
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from deletion_service.admin.deps import AdminDeps
from deletion_service.admin.outcomes import UNAVAILABLE_RETRY_AFTER_S, HttpOutcome, http_answer
from deletion_service.admin.schemas import REF, Answer, DlqEntryModel, ReadyAnswer, payload_schemas
from deletion_service.broker.interface import BrokerError
from deletion_service.dlq import list_dlq
from deletion_service.inflight import estimated_inflight
from deletion_service.model import DeleteLedgerPayload, InvalidRequest, decode_payload

_log = logging.getLogger("ledger_deletion.admin")

API_VERSION = "1.0.0"
MAX_BODY_BYTES = 64 * 1024
DELETE_PATH = "/admin/v2/ledger-deletion/delete"
INFLIGHT_PATH = "/admin/v2/broker-stats/estimated-inflight-deletion-ledger-count"
DLQ_PATH = "/admin/v2/ledger-deletion/dlq"
DEFAULT_DLQ_LIMIT = 1000

DESCRIPTION = """\
Admin API of the `ledger-deletion` daemon (Apache Pulsar PIP-186 two-phase ledger deletion).

* Reads (`GET`) need no credentials.
* `POST /admin/v2/ledger-deletion/delete` needs `Authorization: Bearer <token>` when the daemon has an admin
  token (`adminTokenFile` or `LEDGER_DELETION_ADMIN_TOKEN`); the daemon refuses to listen on a non-loopback
  address without one.
* Every answer that is not data is `{"outcome": ..., "reason": ...}`.
"""

_STATUS_OUTCOME = {400: HttpOutcome.INVALID, 401: HttpOutcome.UNAUTHORIZED, 404: HttpOutcome.NOT_FOUND,
                   405: HttpOutcome.METHOD_NOT_ALLOWED, 413: HttpOutcome.TOO_LARGE,
                   415: HttpOutcome.UNSUPPORTED_MEDIA_TYPE, 503: HttpOutcome.UNAVAILABLE}

_RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before asking again", "schema": {"type": "integer"}}}
_RETRY_AFTER_REQUIRED = {"Retry-After": {**_RETRY_AFTER["Retry-After"], "required": True}}


def _answer(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"model": Answer, "description": description}
    if headers:
        out["headers"] = headers
    return out


def answer(status: int, outcome: HttpOutcome, reason: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"outcome": outcome.value, "reason": reason}, status_code=status, headers=headers)


def create_app(deps: AdminDeps, max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    app = FastAPI(title="ledger-deletion admin API", version=API_VERSION, description=DESCRIPTION,
                  docs_url=None, redoc_url=None)  # no CDN-loaded UIs on an admin port; /openapi.json is served
    bearer = HTTPBearer(auto_error=False, scheme_name="adminToken",
                        description="the daemon's admin token (`adminTokenFile` / `LEDGER_DELETION_ADMIN_TOKEN`); "
                                    "required for mutations when configured")
    dlq_lock = threading.Lock()  # concurrent listings would split the parked messages between them

    # (a default, not Annotated[...]: annotations are strings here and ``bearer`` is local)
    def require_token(credentials: HTTPAuthorizationCredentials | None = Security(bearer)) -> None:  # noqa: B008
        if deps.token is None:
            return
        presented = credentials.credentials if credentials is not None else ""
        # Constant time: how far a guess matched must not show in how long the answer took.
        if not hmac.compare_digest(presented.encode("latin-1", "replace"), deps.token.encode("latin-1")):
            why = "missing bearer token" if credentials is None else "wrong bearer token"
            raise HTTPException(401, f"{why}: send Authorization: Bearer <admin token>",
                                headers={"WWW-Authenticate": "Bearer"})

    @app.exception_handler(HTTPException)
    async def _http_error(_: Request, exc: HTTPException) -> JSONResponse:
        return answer(exc.status_code, _STATUS_OUTCOME.get(exc.status_code, HttpOutcome.ERROR), str(exc.detail),
                      exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        # The contract says 400 for invalid input; 422 means "metadata mismatch" here.
        parts = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5]]
        return answer(400, HttpOutcome.INVALID, "; ".join(parts) or "invalid request")

    @app.get("/healthz", tags=["health"], summary="Liveness: the process answers", response_model=Answer,
             description="Always 200 while the process runs; checks no dependency (that is `/readyz`).")
    def healthz() -> dict[str, str]:
        return {"outcome": "ok", "reason": "process alive"}

    @app.get("/readyz", tags=["health"], summary="Readiness: metadata store and broker reachable",
             description="Probes each metadata store (a read of its root) and the broker (a TCP connection) "
                         "with a deadline of a few seconds. 503 names the component that is down.",
             response_model=ReadyAnswer,
             responses={503: {"model": ReadyAnswer, "description": "a dependency is unreachable; `checks` says which"}})
    def readyz() -> JSONResponse:
        results = deps.readiness()
        down = sorted(name for name, why in results.items() if why is not None)
        checks = {name: why or "ok" for name, why in results.items()}
        if down:
            return JSONResponse({"outcome": "unavailable", "reason": f"unreachable: {', '.join(down)}",
                                 "checks": checks}, status_code=503)
        return JSONResponse({"outcome": "ok", "reason": "all dependencies reachable", "checks": checks})

    @app.get("/metrics", tags=["health"], summary="Prometheus metrics", response_class=PlainTextResponse,
             description="Prometheus text exposition of the deletion metrics (`pulsar_ledger_deletion_*`) and the "
                         "cursor core's (`pulsar_cursor_*`).",
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                              "description": "Prometheus text format 0.0.4"}})
    def metrics() -> PlainTextResponse:
        body = b"".join(generate_latest(r) for r in deps.registries)
        return PlainTextResponse(body, media_type=CONTENT_TYPE_LATEST)

    @app.get(INFLIGHT_PATH, tags=["broker-stats"], summary="Estimated in-flight deletions (PIP-186)",
             description="Requests sent but not yet consumed: the backlog of subscription `ledger-deletion` summed "
                         "over every partition of the deletion topic and its RETRY topic. A bare JSON integer. "
                         "From the brokers' admin REST (`msgBacklog`) on a cluster, from `/metrics` on the embedded "
                         "broker (refreshed every ~10 s, so it lags).",
             response_model=int,
             responses={200: {"description": "a bare JSON integer", "content": {"application/json": {
                 "schema": {"type": "integer", "minimum": 0}, "example": 42}}},
                 503: _answer("broker statistics unavailable", _RETRY_AFTER_REQUIRED)})
    def inflight() -> Any:
        try:
            return estimated_inflight(deps.backlog, deps.topics)
        except (BrokerError, OSError, ValueError) as e:
            return answer(503, HttpOutcome.UNAVAILABLE, f"broker statistics unavailable: {e}",
                          {"Retry-After": str(UNAVAILABLE_RETRY_AFTER_S)})

    @app.get(DLQ_PATH, tags=["ledger-deletion"], summary="List the dead-letter queue (without acknowledging)",
             description="The requests parked in the DLQ, oldest first, read through subscription "
                         "`ledger-deletion-dlq` without acknowledging them: listing changes nothing. Waits about a "
                         "second for the queue to drain, so expect that latency.",
             response_model=list[DlqEntryModel],
             responses={400: _answer("`limit` is not an integer in range"),
                        503: _answer("the broker is unreachable", _RETRY_AFTER_REQUIRED)})
    def dlq(limit: Annotated[int, Query(ge=1, le=10_000, description="at most this many entries")]
            = DEFAULT_DLQ_LIMIT) -> Any:
        try:
            with dlq_lock:
                entries = list_dlq(deps.broker, deps.topics, limit, deps.dlq_wait_s)
        except BrokerError as e:
            return answer(503, HttpOutcome.UNAVAILABLE, f"broker unavailable: {e}",
                          {"Retry-After": str(UNAVAILABLE_RETRY_AFTER_S)})
        return [e.to_json() for e in entries]

    @app.post(DELETE_PATH, tags=["ledger-deletion"], summary="Verify and delete one ledger now (synchronous)",
              description="Runs the delete phase's decision and actions for one request, as the consumer would, and "
                          "answers with how it ended instead of acknowledging a message. The request is treated as "
                          "reason `manual`: a ledger younger than `minLedgerAgeSeconds` is not deleted yet. "
                          "Idempotent: a ledger already gone answers 200 `absent`.",
              dependencies=[Security(require_token)], response_model=Answer,
              openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                  "schema": {"$ref": REF.format(model="DeleteLedgerPayload")}}}}},
              responses={
                  200: {"description": "`deleted`, or `absent` (already gone: success)"},
                  400: _answer("`invalid`: not JSON, or not a deletion request (the reason names the field)"),
                  401: _answer("`unauthorized`: a token is configured and the bearer token is missing or wrong",
                               {"WWW-Authenticate": {"schema": {"type": "string"}, "required": True}}),
                  409: _answer("`still_in_use`: referenced, never deleted (do not retry); or `not_yet`: the ledger "
                               "is OPEN/IN_RECOVERY or younger than `minLedgerAgeSeconds` (retry after "
                               "`Retry-After`)", _RETRY_AFTER),
                  413: _answer("`too_large`: body over the size limit (64 KiB)"),
                  415: _answer("`unsupported_media_type`: the body must be `application/json`"),
                  422: _answer("`metadata_mismatch`: the ledger's BookKeeper metadata (or the offload target) does "
                               "not belong to the named topic/component; nothing deleted"),
                  500: _answer("`error`: an unexpected error; details in the daemon's log"),
                  502: _answer("`failed`: storage could not be verified or refused the deletion (unreadable "
                               "metadata, offload target error); an operator must look"),
                  503: _answer("`unavailable`: a dependency (metadata store, tiered storage, broker) is down; "
                               "nothing deleted", _RETRY_AFTER_REQUIRED),
              })
    async def delete(request: Request) -> JSONResponse:
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            return answer(415, HttpOutcome.UNSUPPORTED_MEDIA_TYPE, "send the payload as Content-Type: application/json")
        body = await _read_capped(request, max_body_bytes)
        try:
            payload = decode_payload(_json_body(body))
            _check_text(payload)
        except InvalidRequest as e:
            return answer(400, HttpOutcome.INVALID, str(e))
        try:
            result = await run_in_threadpool(deps.service.delete_now, payload)
        except Exception:
            _log.exception("admin delete of %r failed unexpectedly", payload.describe())
            return answer(500, HttpOutcome.ERROR, "unexpected error; see the daemon's log")
        reply = http_answer(result, deps.service.policy.reconsume_later_s)
        # %r: the names come from the caller, and a newline in them must not forge a log line
        _log.info("admin delete of %r: %s (%s)", payload.describe(), reply.outcome.value, reply.reason)
        return answer(reply.status, reply.outcome, reply.reason, reply.headers())

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


async def _read_capped(request: Request, limit: int) -> bytes:
    """The body, refusing more than ``limit`` bytes before reading them when the length is declared."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise HTTPException(413 if declared.isdigit() else 400,
                            f"request body over {limit} bytes" if declared.isdigit() else "invalid Content-Length")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPException(413, f"request body over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _json_body(body: bytes) -> Any:
    """Parse with JSON Schema's number semantics, which the OpenAPI document promises: ``5.0`` is an
    integer there (and in Jackson, which Pulsar's Java tools use), while ``DeleteLedgerPayload``'s
    strict ints would refuse the float.  Integral numbers become ints; NaN and Infinity are not JSON."""

    def number(text: str) -> int | float:
        value = Decimal(text)
        # adjusted() bounds the digits: int(Decimal("1e999999999")) would build a billion-digit number
        if value.adjusted() <= 20 and value == value.to_integral_value():
            return int(value)
        return float(text)

    def constant(text: str) -> Any:
        raise InvalidRequest(f"payload is not JSON: {text} is not a JSON number")

    try:
        return json.loads(body.decode("utf-8"), parse_float=number, parse_constant=constant)
    except UnicodeDecodeError as e:
        raise InvalidRequest(f"payload is not UTF-8 (byte {e.start})") from e
    except json.JSONDecodeError as e:
        raise InvalidRequest(f"payload is not JSON: {e.msg} at line {e.lineno} column {e.colno}") from e
    except ValueError as e:  # e.g. an integer literal over Python's 4300-digit conversion limit
        raise InvalidRequest(f"payload is not usable JSON: {e}") from e


def _check_text(payload: DeleteLedgerPayload) -> None:
    """JSON can carry lone surrogates (``"\\ud800"``); such names can never be encoded into a metadata path."""
    for name in ("topic_name", "cursor_name", "schema_id"):
        value = getattr(payload, name)
        try:
            (value or "").encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidRequest(f"{name}: not valid Unicode text (lone surrogate at {e.start})") from e


def _document(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document, plus the hand-validated request body's schema, minus FastAPI's automatic 422
    on reads (invalid query parameters answer 400 here)."""
    doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes,
                      tags=[{"name": "health", "description": "liveness, readiness, metrics"},
                            {"name": "broker-stats", "description": "PIP-186's in-flight estimate"},
                            {"name": "ledger-deletion", "description": "synchronous deletion and the DLQ"}])
    for item in doc["paths"].values():
        if "get" in item:
            item["get"]["responses"].pop("422", None)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(payload_schemas())
    if "HTTPValidationError" not in json.dumps(doc["paths"]):
        schemas.pop("HTTPValidationError", None)
        schemas.pop("ValidationError", None)
    return doc


def openapi_document() -> dict[str, Any]:
    """The document without a running daemon: the routes never touch ``deps`` until called."""
    return create_app(AdminDeps.unwired()).openapi()


def render_openapi(doc: dict[str, Any]) -> str:
    """Stable text for the committed copy: sorted keys, indent 2, trailing newline."""
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
