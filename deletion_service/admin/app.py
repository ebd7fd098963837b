"""The admin HTTP API (see "HTTP contract" in the design): health, metrics, in-flight, DLQ, delete.

Built with FastAPI so the OpenAPI document comes from this code
(``scripts/gen_openapi.py`` writes ``deploy/openapi.json`` from it; a test
keeps the two equal).  Reads are open; the one mutation, ``POST …/delete``,
needs ``Authorization: Bearer <token>`` when a token is configured, and a
``Content-Type: application/json`` body (which a browser cannot send cross-site
without a CORS preflight we never answer: a web page cannot make a loopback
daemon delete ledgers).  Every error answer is a small JSON object with
``outcome`` and ``reason``; tracebacks and secrets stay out of answers and logs.

``create_app`` only assembles: error handlers, then one small function per
group of routes.  What the document says about each route lives in
``openapi_text.py``; how the delete body is read, in ``request_body.py``.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Callable, Mapping
from html import escape
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from deletion_service.admin import openapi_text as text
from deletion_service.admin.answers import UNAVAILABLE_RETRY_AFTER_S, HttpOutcome, http_answer
from deletion_service.admin.deps import AdminDeps
from deletion_service.admin.request_body import check_text, json_body, read_capped
from deletion_service.admin.schemas import Answer, DlqEntryModel, ReadyAnswer, payload_schemas
from deletion_service.admin.status import add_status_route
from deletion_service.broker.interface import BrokerError
from deletion_service.dlq.marker import MarkerKey
from deletion_service.dlq.operations import Selection, list_dlq
from deletion_service.dlq.reasons import PARKED_REASONS, unknown_reason
from deletion_service.inflight import estimated_inflight
from deletion_service.metrics import PulsarStyle
from deletion_service.protocol.request import InvalidRequest, decode_payload
from deletion_service.protocol.topics import DeletionTopics, namespace_topics
from metastore.formats import parse_namespace

_log = logging.getLogger("deletion_service.admin")

API_VERSION = "1.0.0"
MAX_BODY_BYTES = 64 * 1024
DELETE_PATH = "/admin/v2/ledger-deletion/delete"
INFLIGHT_PATH = "/admin/v2/broker-stats/estimated-inflight-deletion-ledger-count"
DLQ_PATH = "/admin/v2/ledger-deletion/dlq"
DEFAULT_DLQ_LIMIT = 1000

_STATUS_OUTCOME = {400: HttpOutcome.INVALID, 401: HttpOutcome.UNAUTHORIZED, 404: HttpOutcome.NOT_FOUND,
                   405: HttpOutcome.METHOD_NOT_ALLOWED, 413: HttpOutcome.TOO_LARGE,
                   415: HttpOutcome.UNSUPPORTED_MEDIA_TYPE, 503: HttpOutcome.UNAVAILABLE}


def answer(status: int, outcome: HttpOutcome, reason: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"outcome": outcome.value, "reason": reason}, status_code=status, headers=headers)


def _unavailable(reason: str) -> JSONResponse:
    """A 503 that tells the caller when to ask again (the document marks ``Retry-After`` required)."""
    return answer(503, HttpOutcome.UNAVAILABLE, reason, {"Retry-After": str(UNAVAILABLE_RETRY_AFTER_S)})


def create_app(deps: AdminDeps, max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    app = FastAPI(title="ledger-deletion admin API", version=API_VERSION, description=text.DESCRIPTION,
                  docs_url=None, redoc_url=None)  # no CDN-loaded UIs on an admin port; /openapi.json is served
    _add_error_handlers(app)
    _add_health_routes(app, deps)
    _add_inflight_route(app, deps)
    _add_dlq_route(app, deps)
    _add_delete_route(app, deps, max_body_bytes)
    _add_docs_route(app)
    add_status_route(app, deps)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def _add_docs_route(app: FastAPI) -> None:
    """``/docs``: the API documentation as one self-contained page rendered from the OpenAPI
    document, where FastAPI's Swagger UI would load scripts from a CDN onto an admin port."""

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    def docs() -> HTMLResponse:
        return HTMLResponse(render_docs(app.openapi()))


def render_docs(doc: dict[str, Any]) -> str:
    """Every operation: method, path, summary, description and answers, then a link to /openapi.json."""
    info = doc.get("info", {})
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(info.get('title', ''))}</title>"
             "</head><body>", f"<h1>{escape(info.get('title', ''))} {escape(info.get('version', ''))}</h1>",
             f"<p>{escape(info.get('description', ''))}</p>",
             "<p>Machine-readable: <a href='/openapi.json'>/openapi.json</a> (OpenAPI 3).</p>"]
    for path, operations in doc.get("paths", {}).items():
        for method, op in operations.items():
            answers = "".join(f"<li><code>{escape(str(code))}</code> {escape(r.get('description', ''))}</li>"
                              for code, r in op.get("responses", {}).items())
            parts.append(f"<h2><code>{escape(method.upper())} {escape(path)}</code></h2>"
                         f"<p><b>{escape(op.get('summary', ''))}</b></p><p>{escape(op.get('description', ''))}</p>"
                         f"<ul>{answers}</ul>")
    return "".join(parts) + "</body></html>"


def _add_error_handlers(app: FastAPI) -> None:
    """Every error answer is ``{"outcome", "reason"}``, never FastAPI's ``{"detail"}``."""

    @app.exception_handler(HTTPException)
    async def _http_error(_: Request, exc: HTTPException) -> JSONResponse:
        return answer(exc.status_code, _STATUS_OUTCOME.get(exc.status_code, HttpOutcome.ERROR), str(exc.detail),
                      exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        # The contract says 400 for invalid input; 422 means "metadata mismatch" here.
        parts = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5]]
        return answer(400, HttpOutcome.INVALID, "; ".join(parts) or "invalid request")


def _add_health_routes(app: FastAPI, deps: AdminDeps) -> None:
    """Liveness, readiness and ``/metrics``: the probes a supervisor and Prometheus poll."""

    @app.get("/healthz", response_model=Answer, **text.HEALTHZ)
    def healthz() -> JSONResponse:
        dead = deps.liveness()
        if dead is not None:
            return JSONResponse({"outcome": "unavailable", "reason": dead}, status_code=503)
        return JSONResponse({"outcome": "ok", "reason": "process alive"})

    @app.get("/readyz", response_model=ReadyAnswer, **text.READYZ)
    def readyz() -> JSONResponse:
        results = deps.readiness()
        down = sorted(name for name, why in results.items() if why is not None)
        checks = {name: why or "ok" for name, why in results.items()}
        if down:
            return JSONResponse({"outcome": "unavailable", "reason": f"unreachable: {', '.join(down)}",
                                 "checks": checks}, status_code=503)
        return JSONResponse({"outcome": "ok", "reason": "all dependencies reachable", "checks": checks})

    @app.get("/metrics", response_class=PlainTextResponse, **text.METRICS)
    def metrics() -> PlainTextResponse:
        body = b"".join(generate_latest(PulsarStyle(r, deps.cluster)) for r in deps.registries)
        return PlainTextResponse(body, media_type=CONTENT_TYPE_LATEST)


NamespaceQuery = Annotated[str | None, Query(
    description="namespace scope: that namespace's own deletion topics (TENANT/NAMESPACE); without it, "
                "every deletion topic this daemon serves (each namespace's, and the cluster's)",
    pattern=r"^[-=:.\w]+/[-=:.\w]+$", max_length=400)]


ReasonQuery = Annotated[str | None, Query(
    description="only requests parked for this reason: " + ", ".join(PARKED_REASONS) + " (any other is refused "
                "with 400, naming these)", max_length=200)]


def _scoped(deps: AdminDeps, namespace: str | None) -> list[DeletionTopics] | JSONResponse:
    """Everything this daemon serves (every namespace's topics and the cluster's: see
    :mod:`deletion_service.protocol.scope`), or ``?namespace=``'s own; 400 for a name Pulsar would refuse."""
    if namespace is None:
        served = list(deps.service.served) if deps.service is not None else []
        return served or [deps.topics]
    try:
        parse_namespace(namespace)
    except ValueError as e:
        return answer(400, HttpOutcome.INVALID, f"namespace {namespace!r}: {e}")
    return [namespace_topics(namespace, deps.topics)]


def _add_inflight_route(app: FastAPI, deps: AdminDeps) -> None:
    """PIP-186's in-flight estimate: a bare integer, or 503 when the broker's statistics cannot be read."""

    @app.get(INFLIGHT_PATH, response_model=int, **text.INFLIGHT)
    def inflight(namespace: NamespaceQuery = None) -> Any:
        topics = _scoped(deps, namespace)
        if isinstance(topics, JSONResponse):
            return topics
        try:
            return estimated_inflight(deps.backlog, topics)
        except (BrokerError, OSError, ValueError) as e:
            return _unavailable(f"broker statistics unavailable: {e}")


def _add_dlq_route(app: FastAPI, deps: AdminDeps) -> None:
    """Listing the DLQ with a reader: it takes nothing, so listings may run at once (an operator's
    ``dlq list`` included) and each sees every parked request."""

    @app.get(DLQ_PATH, response_model=list[DlqEntryModel], **text.DLQ)
    def dlq(limit: Annotated[int, Query(ge=1, le=10_000, description="at most this many entries")]
            = DEFAULT_DLQ_LIMIT, namespace: NamespaceQuery = None, reason: ReasonQuery = None) -> Any:
        topics = _scoped(deps, namespace)
        if isinstance(topics, JSONResponse):
            return topics
        if reason is not None and (why := unknown_reason(reason)) is not None:
            return answer(400, HttpOutcome.INVALID, why)  # a typo must not read as "nothing parked"
        key = MarkerKey.read(deps.service.store if deps.service is not None else None)
        try:
            entries = list_dlq(deps.broker, topics, key, limit, Selection(reason=reason) if reason else None)
        except BrokerError as e:
            return _unavailable(f"broker unavailable: {e}")
        return [e.to_json() for e in entries]


def _token_check(deps: AdminDeps) -> Callable[..., None]:
    """The dependency that guards mutations: the configured bearer token, compared in constant time."""
    bearer = HTTPBearer(auto_error=False, scheme_name="adminToken", description=text.BEARER_DESCRIPTION)

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

    return require_token


def _add_delete_route(app: FastAPI, deps: AdminDeps, max_body_bytes: int) -> None:
    """The one mutation: the delete phase for one request, answered instead of acknowledged."""

    @app.post(DELETE_PATH, dependencies=[Security(_token_check(deps))], response_model=Answer, **text.DELETE)
    async def delete(request: Request) -> JSONResponse:
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            return answer(415, HttpOutcome.UNSUPPORTED_MEDIA_TYPE, "send the payload as Content-Type: application/json")
        body = await read_capped(request, max_body_bytes)
        try:
            payload = decode_payload(json_body(body))
            check_text(payload)
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


def _document(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document, plus the hand-validated request body's schema, minus FastAPI's automatic 422
    on reads (invalid query parameters answer 400 here)."""
    doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes,
                      tags=text.TAGS)
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
