"""A deletion service (not consuming) behind a live admin HTTP server on 127.0.0.1, and a client that
calls it with urllib, so status codes, headers and bodies are seen exactly as a client sees them."""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from deletion_service.admin import AdminDeps, AdminServer, create_app
from deletion_service.inflight import MetricsBacklog
from metastore.interface import MetadataStore
from tests.support.deletion_world import World, make_world
from tests.support.harness import PulsarLiteBroker

DELETE = "/admin/v2/ledger-deletion/delete"
TOPIC = "persistent://tenant/ns/orders"


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: Any


@dataclass
class Stack:
    world: World
    server: AdminServer

    def call(self, method: str, path: str, body: Any = None, token: str | None = None,
             content_type: str = "application/json", raw: bytes | None = None) -> Reply:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.server.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", content_type)
        if token is not None:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                status, headers, text = r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
        except urllib.error.HTTPError as e:
            status, headers, text = e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()
        ctype = headers.get("content-type", "")
        return Reply(status, headers, json.loads(text) if ctype.startswith("application/json") else text.decode())

    def delete(self, ledger_id: int, topic: str = TOPIC, token: str | None = None, **extra: Any) -> Reply:
        body = {"topicName": topic, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER",
                "ledgerId": ledger_id, **extra}
        return self.call("POST", DELETE, body, token=token)


@contextlib.contextmanager
def admin_stack(store: MetadataStore, bk_store: MetadataStore, broker: PulsarLiteBroker, token: str | None = None,
                dlq_wait_s: float = 0.5, registries: tuple[CollectorRegistry, ...] = (),
                **config: Any) -> Iterator[Stack]:
    """A deletion service (not consuming) behind a live admin server."""
    world = make_world(store, bk_store, broker.service_url, **{"minLedgerAgeSeconds": 3600, **config})
    deps = AdminDeps.for_service(world.service, MetricsBacklog(broker.metrics_url), token, registries)
    deps.dlq_wait_s = dlq_wait_s
    server = AdminServer(create_app(deps), "127.0.0.1:0", token_configured=token is not None).start()
    try:
        yield Stack(world, server)
    finally:
        server.stop()
        world.service.close()
        world.service.broker.close()
