"""The admin HTTP API over a real HTTP server, real ZooKeeper and the embedded broker.

Each test builds a deletion service on a fresh ZooKeeper chroot and a fresh
deletion topic, serves it with :class:`AdminServer` on 127.0.0.1 (a free port)
and talks to it with urllib, so status codes, headers and bodies are checked
exactly as a client sees them.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from deletion_service.admin import AdminServer
from deletion_service.cluster_writer import pulsar_custom_metadata
from deletion_service.cursor.epoch_metrics import EpochMetrics
from deletion_service.dlq.marker import MarkerKey
from deletion_service.errors import UserError
from metastore import open_store
from metastore.formats import Position
from metastore.interface import MetadataStore
from tests.support.admin_stack import DELETE, TOPIC, Stack, admin_stack
from tests.support.deletion_world import DAY_MS, now_ms, request
from tests.support.harness import PulsarLiteBroker, ZooKeeperServer, free_port, wait_until
from tests.support.parked_requests import as_parked

INFLIGHT = "/admin/v2/broker-stats/estimated-inflight-deletion-ledger-count"
DLQ = "/admin/v2/ledger-deletion/dlq"
OTHER = "persistent://tenant/ns/payments"


@pytest.fixture
def stores(zk_url: str, zookeeper: ZooKeeperServer) -> Iterator[tuple[MetadataStore, MetadataStore]]:
    store = open_store(zk_url)
    bk_store = open_store(f"{zookeeper.url}/bk-{uuid.uuid4().hex[:8]}")
    yield store, bk_store
    store.close()
    bk_store.close()


@pytest.fixture
def stack(stores: tuple[MetadataStore, MetadataStore], pulsar_broker: PulsarLiteBroker) -> Iterator[Stack]:
    with admin_stack(*stores, pulsar_broker) as s:
        yield s


def old_ledger(stack: Stack, ledger_id: int, topic: str = TOPIC, **kw: Any) -> int:
    stack.world.writer.bk_ledger(ledger_id, pulsar_custom_metadata(topic), ctime_ms=now_ms() - 2 * DAY_MS, **kw)
    return ledger_id


# ---- the delete endpoint: one row of the decision table each


def test_orphan_is_deleted_then_absent(stack: Stack) -> None:
    w = stack.world
    w.writer.managed_ledger(TOPIC, [old_ledger(stack, 10)])  # the topic lives on, 11 is not in its list
    old_ledger(stack, 11)
    reply = stack.delete(11)
    assert (reply.status, reply.body["outcome"]) == (200, "deleted"), reply.body
    assert not w.bk_exists(11) and w.bk_exists(10)
    again = stack.delete(11)
    assert (again.status, again.body["outcome"]) == (200, "absent"), again.body
    assert w.service.metrics.value("pulsar_ledger_deletion_deleted_total", {"type": "LEDGER"}) == 1


def test_referenced_ledger_is_409_and_kept(stack: Stack) -> None:
    w = stack.world
    w.writer.managed_ledger(TOPIC, [old_ledger(stack, 20), old_ledger(stack, 21)])
    w.writer.cursor(TOPIC, "sub", Position(20, 0))
    reply = stack.delete(21)
    assert (reply.status, reply.body["outcome"]) == (409, "still_in_use"), reply.body
    assert "retry-after" not in reply.headers  # retrying cannot help
    assert w.bk_exists(21)


def test_forged_request_is_422_and_kept(stack: Stack) -> None:
    old_ledger(stack, 30, topic=OTHER)  # the ledger belongs to another topic
    reply = stack.delete(30, topic=TOPIC)
    assert (reply.status, reply.body["outcome"]) == (422, "metadata_mismatch"), reply.body
    assert stack.world.bk_exists(30)


def test_open_or_young_ledger_is_409_not_yet_with_retry_after(stack: Stack) -> None:
    old_ledger(stack, 40, state="OPEN")
    stack.world.writer.managed_ledger(TOPIC, [])  # exists, lists nothing newer: 41 is not proven superseded
    stack.world.writer.bk_ledger(41, pulsar_custom_metadata(TOPIC), ctime_ms=now_ms())  # created just now
    for lid, why in ((40, "OPEN"), (41, "younger than minLedgerAgeSeconds")):
        reply = stack.delete(lid)
        assert (reply.status, reply.body["outcome"]) == (409, "not_yet"), reply.body
        assert why in reply.body["reason"]
        assert int(reply.headers["retry-after"]) >= 1
        assert stack.world.bk_exists(lid)


@pytest.mark.parametrize(
    ("raw", "content_type", "status", "outcome", "says"),
    [
        (b"{not json", "application/json", 400, "invalid", "not JSON"),
        (b'{"topicName": "persistent://t/ns/x", "ledgerType": "LEDGER"}', "application/json", 400, "invalid",
         "ledgerComponent"),
        (b'{"topicName": "persistent://t/ns/x", "ledgerComponent": "MANAGED_CURSOR", "ledgerType": "LEDGER", '
         b'"ledgerId": 5}', "application/json", 400, "invalid", "cursorName is required"),
        (b'{"topicName": "non-persistent://t/ns/x", "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER", '
         b'"ledgerId": 5}', "application/json", 400, "invalid", "only persistent topics"),
        (b'[1, 2]', "application/json", 400, "invalid", "JSON object"),
        (b'{"ledgerId": 1}', "text/plain", 415, "unsupported_media_type", "application/json"),
        (b'{"pad": "' + b"x" * 70_000 + b'"}', "application/json", 413, "too_large", "over 65536 bytes"),
    ],
)
def test_invalid_requests(stack: Stack, raw: bytes, content_type: str, status: int, outcome: str, says: str) -> None:
    reply = stack.call("POST", DELETE, raw=raw, content_type=content_type)
    assert (reply.status, reply.body["outcome"]) == (status, outcome), reply.body
    assert says in reply.body["reason"]
    assert "Traceback" not in json.dumps(reply.body)


def test_token_guards_deletion(stores: tuple[MetadataStore, MetadataStore], pulsar_broker: PulsarLiteBroker,
                               caplog: pytest.LogCaptureFixture) -> None:
    token = "tok-" + uuid.uuid4().hex
    caplog.set_level(logging.DEBUG)
    with admin_stack(*stores, pulsar_broker, token=token) as s:
        old_ledger(s, 50)
        for presented in (None, "wrong", token + "x"):
            reply = s.delete(50, token=presented)
            assert (reply.status, reply.body["outcome"]) == (401, "unauthorized"), reply.body
            assert reply.headers["www-authenticate"] == "Bearer"
            assert s.world.bk_exists(50)
        # An invalid body without a token is still 401: nothing is read for an unauthenticated caller.
        assert s.call("POST", DELETE, raw=b"{not json").status == 401
        assert s.call("GET", "/healthz").status == 200  # reads need no token
        assert s.call("GET", DLQ).status == 200
        reply = s.delete(50, token=token)
        assert (reply.status, reply.body["outcome"]) == (200, "deleted"), reply.body
        assert not s.world.bk_exists(50)
    assert token not in caplog.text


def test_dependency_down_is_503(tmp_path: Path, zookeeper: ZooKeeperServer, pulsar_broker: PulsarLiteBroker) -> None:
    private = ZooKeeperServer(tmp_path / "zk").start()  # ours to stop; never the session server
    try:
        store = open_store(f"{private.url}/t")
        bk_store = open_store(f"{private.url}/bk")
        try:
            with admin_stack(store, bk_store, pulsar_broker) as s:
                old_ledger(s, 60)
                assert s.call("GET", "/readyz").status == 200
                private.stop()
                started = time.monotonic()
                reply = s.delete(60)
                assert (reply.status, reply.body["outcome"]) == (503, "unavailable"), reply.body
                assert int(reply.headers["retry-after"]) > 0
                assert time.monotonic() - started < 20
                ready = s.call("GET", "/readyz")
                assert ready.status == 503
                assert ready.body["checks"]["broker"] == "ok"
                assert ready.body["checks"]["metadataStore"] != "ok"
                assert "metadataStore" in ready.body["reason"]
                assert s.call("GET", "/healthz").status == 200
                private.start()  # same port: the ledger is still there, and now it goes
                wait_until(lambda: s.call("GET", "/readyz").status == 200, 30, "readiness after ZooKeeper's return",
                           interval=0.5)
                assert s.delete(60).body["outcome"] == "deleted"
        finally:
            store.close()
            bk_store.close()
    finally:
        private.stop()


# ---- reads


def test_estimated_inflight_counts_sent_unconsumed_requests(stack: Stack) -> None:
    first = stack.call("GET", INFLIGHT)
    assert first.status == 200 and first.body == 0  # a fresh deletion topic
    for lid in (70, 71, 72, 73, 74):  # spread over both partitions
        stack.world.service.send_pending_delete(request(TOPIC, lid))
    # pulsar-lite refreshes /metrics about every 10 s
    wait_until(lambda: stack.call("GET", INFLIGHT).body == 5, 25, "the five requests in the in-flight estimate",
               interval=0.5)
    reply = stack.call("GET", INFLIGHT)
    assert reply.headers["content-type"] == "application/json" and isinstance(reply.body, int)


def test_dlq_lists_parked_requests_without_acking(stack: Stack) -> None:
    assert stack.call("GET", DLQ).body == []
    svc = stack.world.service
    seal = MarkerKey.ensure(svc.store).parked_seal()  # parked as the daemon parks them: their reasons sealed
    for data, reason, error in ((request(TOPIC, 80).to_json(), "cannot-verify", "boom"),
                                (b"\xff not a request", "invalid-request", "not UTF-8")):
        svc.publisher.send_dlq(data, as_parked(data, reason, error, seal, svc.topics.dlq))
    for _ in range(2):  # listing acks nothing: the same two entries each time
        entries = stack.call("GET", DLQ).body
        assert [e["reason"] for e in entries] == ["cannot-verify", "invalid-request"]
    decoded, raw = entries
    assert decoded["request"]["ledgerId"] == 80 and decoded["payloadBase64"] is None
    assert raw["request"] is None and raw["payloadBase64"]
    assert len(stack.call("GET", f"{DLQ}?limit=1").body) == 1
    bad = stack.call("GET", f"{DLQ}?limit=0")
    assert (bad.status, bad.body["outcome"]) == (400, "invalid")


def test_metrics_serves_every_registry(stores: tuple[MetadataStore, MetadataStore],
                                       pulsar_broker: PulsarLiteBroker) -> None:
    """Every registry, every sample labelled with its cluster as Pulsar's are, and no ``_created`` series
    (prometheus-client's default, which Pulsar never emits)."""
    cursor_registry = CollectorRegistry()
    EpochMetrics("c", "t/ns", TOPIC, "sub", registry=cursor_registry).on_start()
    with admin_stack(*stores, pulsar_broker, registries=(cursor_registry,), clusterName="east") as s:
        reply = s.call("GET", "/metrics")
        assert reply.status == 200 and reply.headers["content-type"].startswith("text/plain")
        samples = [sample for family in text_string_to_metric_families(reply.body) for sample in family.samples]
        by_name = {sample.name: sample for sample in samples}
        assert by_name["pulsar_ledger_deletion_received_total"].labels == {"cluster": "east"}
        assert by_name["pulsar_ledger_deletion_received_total"].value == 0
        assert by_name["pulsar_cursor_epoch_increase_task_state"].labels["cluster"] == "c"  # its own, kept
        assert [s.name for s in samples if "cluster" not in s.labels] == []
        assert [s.name for s in samples if s.name.endswith("_created")] == []


def test_the_committed_document_is_served(stack: Stack) -> None:
    committed = json.loads((Path(__file__).resolve().parents[3] / "deploy" / "openapi.json").read_text())
    assert stack.call("GET", "/openapi.json").body == committed


def test_unknown_route_and_method_answer_json(stack: Stack) -> None:
    assert stack.call("GET", "/nope").body["outcome"] == "not_found"
    reply = stack.call("PUT", "/healthz", body={})
    assert (reply.status, reply.body["outcome"]) == (405, "method_not_allowed")


# ---- the server


def test_non_loopback_address_needs_a_token(stack: Stack) -> None:
    app = stack.server.app
    for address in ("0.0.0.0:0", "[::]:0", "example.com:8090"):
        with pytest.raises(UserError, match="a non-loopback address requires an admin token"):
            AdminServer(app, address, token_configured=False).start()


def test_port_in_use_is_a_clear_error(stack: Stack) -> None:
    with pytest.raises(UserError, match=f"127.0.0.1:{stack.server.port} is already in use"):
        AdminServer(stack.server.app, f"127.0.0.1:{stack.server.port}", token_configured=False).start()
    assert stack.call("GET", "/healthz").status == 200  # the running one is untouched


def test_stop_is_graceful_and_frees_the_port(stack: Stack) -> None:
    port = free_port()
    server = AdminServer(stack.server.app, f"127.0.0.1:{port}", token_configured=False).start()
    assert server.url == f"http://127.0.0.1:{port}"
    server.stop()
    again = AdminServer(stack.server.app, f"127.0.0.1:{port}", token_configured=False).start()
    again.stop()
