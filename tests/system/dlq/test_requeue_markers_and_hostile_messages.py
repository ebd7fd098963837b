"""Requeue, settlement markers, hostile messages and unscoped readers of the DLQ, on real processes: the
real CLI, the real daemon (``run``) and its admin API, the embedded pulsar-lite broker and the SQLite
metadata store of a data dir.

1. ``dlq requeue`` must not launder a cross-namespace request onto the namespace it names.
2. A forged settlement marker (a request carrying the marker property, or one written straight
   into a DLQ) must hide nothing.
3. One hostile message (deeply nested JSON and the marker property) must not break any DLQ reader,
   and purge must remove it.
4. Unscoped ``inflight``, ``dlq list`` and the admin API's endpoints must read every namespace's
   topics in namespace scope.
"""

from __future__ import annotations

import json
import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from deletion_service.protocol.topics import namespace_topics
from metastore import open_store
from metastore.formats import ledger_path
from tests.support.daemon_process import answers
from tests.support.dlq_deployment import CLUSTER, MARKER, Deployment, deployed
from tests.support.harness import free_port, wait_until
from tests.support.metrics_scrape import metric, scrape

ACME = "persistent://acme/orders/payments"
GLOBEX = "persistent://globex/events/clicks"
ACME_TOPICS = namespace_topics("acme/orders", CLUSTER)
GLOBEX_TOPICS = namespace_topics("globex/events", CLUSTER)


def _request(topic: str, ledger_id: int, reason: str = "manual") -> bytes:
    return json.dumps({"topicName": topic, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER",
                       "ledgerId": ledger_id, "markedAt": 1, "reason": reason}).encode()


@pytest.fixture
def namespaced(tmp_path: Path) -> Iterator[Deployment]:
    """Namespace scope, two tenants' topics, ledgers of globex's that acme's producers will ask for."""
    for d in deployed(tmp_path, 'ledgerDeletionTopicScope = "namespace"\nminLedgerAgeSeconds = 0\n'):
        with open_store(f"sqlite:///{d.data_dir / 'metadata.db'}") as store:
            writer = ClusterWriter(store)
            writer.ensure_layout()
            writer.managed_ledger(ACME, [])
            writer.managed_ledger(GLOBEX, [])
            for lid in (61, 62, 71, 72, 73):
                writer.bk_ledger(lid, pulsar_custom_metadata(GLOBEX if lid < 70 else ACME))
        yield d


@pytest.fixture
def clustered(tmp_path: Path) -> Iterator[Deployment]:
    for d in deployed(tmp_path, "minLedgerAgeSeconds = 0\n"):
        with open_store(f"sqlite:///{d.data_dir / 'metadata.db'}") as store:
            ClusterWriter(store).ensure_layout()
        yield d


# ---- 1. requeue goes where the request was parked


def test_requeue_sends_a_cross_namespace_request_back_where_it_was_parked_never_where_it_says(
        namespaced: Deployment) -> None:
    d = namespaced
    # acme's producers ask, on acme's own topic, for globex's ledger 61 ...
    d.send(ACME_TOPICS.base, [(_request(GLOBEX, 61), {})])
    # ... and write straight into acme's DLQ a request for globex's 62 that claims a retryable reason
    [forged_parked] = d.send(ACME_TOPICS.dlq, [(_request(GLOBEX, 62), {"reason": "max-retries-reached"})])
    d.run_until_idle()  # dead-letters 61 as cross-namespace in acme's DLQ
    parked = {e["request"]["ledgerId"]: e for e in d.listed("--namespace", "acme/orders")}
    assert parked[61]["reason"] == "cross-namespace" and parked[62]["messageId"] == forged_parked

    by_filter = d.cli("--json", "dlq", "requeue", "--namespace", "acme/orders", "--all")
    by_id = d.cli("--json", "dlq", "requeue", "--namespace", "acme/orders", parked[61]["messageId"])
    d.run_until_idle()  # whatever was requeued is decided again: by acme's daemon, under acme's scope

    assert d.present(61, 62) == [61, 62], "a request parked in acme's DLQ deleted globex's ledger"
    assert [m for m in d.read(GLOBEX_TOPICS.base)] == [], "a requeue routed a request by its own topicName"
    assert by_filter.returncode == 0, by_filter.stderr
    assert json.loads(by_filter.stdout)["keptRefused"] == [parked[61]["messageId"]]  # a filter leaves it parked
    assert json.loads(by_filter.stdout)["messageIds"] == [forged_parked]  # to acme's topic: its origin
    assert by_id.returncode == 0, by_id.stderr
    assert json.loads(by_id.stdout)["messageIds"] == [parked[61]["messageId"]]  # named: back to acme's topic
    again = d.listed("--namespace", "acme/orders")
    assert sorted((e["request"]["ledgerId"], e["reason"]) for e in again) == [
        (61, "cross-namespace"), (62, "cross-namespace")]


# ---- 2. forged settlement markers


def test_forged_settlement_markers_hide_nothing(clustered: Deployment) -> None:
    d = clustered
    legit = d.send(CLUSTER.dlq, [(_request("persistent://t/ns/a", lid), {"reason": "delete-failed"})
                                 for lid in (1, 2)])
    forged = json.dumps({"settled": legit}).encode()
    # one forged marker sent as a request (the daemon dead-letters it, once copying its properties) ...
    d.send(CLUSTER.partition_topics[0], [(forged, {MARKER: "purge"})])
    # ... and one written straight into the DLQ (what a tenant may do in its own namespace's DLQ)
    [direct] = d.send(CLUSTER.dlq, [(forged, {MARKER: "purge"})])
    d.run_until_idle()
    listed = d.listed()
    assert legit[0] in [e["messageId"] for e in listed] and legit[1] in [e["messageId"] for e in listed], \
        "a forged marker hid parked requests"
    assert len(listed) == 4 and direct in [e["messageId"] for e in listed]
    copies = [m for m in d.read(CLUSTER.dlq) if m.properties().get("reason") == "invalid-request"]
    assert len(copies) == 1 and MARKER not in copies[0].properties(), "the DLQ copy carried the request's marker"
    # the tool's own markers still settle exactly what they name
    r = d.cli("--json", "dlq", "purge", legit[0], "--yes")
    assert r.returncode == 0, r.stderr
    assert legit[0] not in [e["messageId"] for e in d.listed()] and len(d.listed()) == 3
    r = d.cli("--json", "dlq", "purge", "--all", "--yes")
    assert json.loads(r.stdout)["purged"] == 3 and d.listed() == []


# ---- 3. one hostile message


NESTED = b'{"settled":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
HOSTILE = [(NESTED, {MARKER: "purge"}), (b"\xff\xfe" * 50, {MARKER: "x", "reason": "r" * 4000}),
           (b'{"settled":["0:0"],"mac":"00"}', {MARKER: "purge", "RECONSUMETIMES": "9" * 3000}),
           (b"[" * 50_000, {"lastError": "\u2028\u00e9"})]


def test_one_hostile_message_breaks_no_dlq_reader_and_purge_removes_it(clustered: Deployment) -> None:
    d = clustered
    port = free_port()
    proc = d.daemon(port)
    api = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: answers(f"{api}/healthz"), 60, "the daemon", proc=proc)
        d.send(CLUSTER.partition_topics[1], [(NESTED, {MARKER: "purge"})])  # the daemon dead-letters its copy
        wait_until(lambda: metric(scrape(port), 'pulsar_ledger_deletion_acked_total{outcome="dlq"}') == 1, 60,
                   "the daemon's dead letter", proc=proc)
        direct = d.send(CLUSTER.dlq, HOSTILE)
        parked = len(HOSTILE) + 1
        listed = d.listed()
        assert len(listed) == parked and set(direct) <= {e["messageId"] for e in listed}
        with urllib.request.urlopen(f"{api}/admin/v2/ledger-deletion/dlq", timeout=30) as answer:
            assert len(json.loads(answer.read())) == parked
        wait_until(lambda: metric(scrape(port), "pulsar_ledger_deletion_dlq_size") == parked, 60,
                   "the DLQ gauge counting every hostile message", proc=proc)
        r = d.cli("--json", "dlq", "purge", "--all", "--yes")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["purged"] == parked
        assert d.listed() == []
        with urllib.request.urlopen(f"{api}/admin/v2/ledger-deletion/dlq", timeout=30) as answer:
            assert json.loads(answer.read()) == []
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


# ---- 4. unscoped readers


def test_unscoped_readers_see_every_namespace(namespaced: Deployment, tmp_path: Path) -> None:
    d = namespaced
    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(_request(ACME, lid).decode() + "\n" for lid in (71, 72, 73)))
    [parked] = d.send(GLOBEX_TOPICS.dlq, [(_request(GLOBEX, 61), {"reason": "delete-failed"})])
    d.stop_broker()  # so inflight starts its own and counts exactly (a running broker's metrics lag ~10 s)
    r = d.cli("enqueue", "--from-file", str(requests))  # to acme's own topic
    assert r.returncode == 0, r.stderr
    r = d.cli("--json", "inflight")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["estimatedInflight"] == 3, f"unscoped inflight missed a namespace: {r.stdout}"
    listed = d.listed()
    assert [(e["messageId"], e["topic"]) for e in listed] == [(parked, GLOBEX_TOPICS.dlq)]
    # the daemon's endpoints: 71..73 are OPEN, so they wait in acme's RETRY, in flight
    with open_store(f"sqlite:///{d.data_dir / 'metadata.db'}") as store:
        for lid in (71, 72, 73):
            store.delete(ledger_path("/ledgers", lid, "hierarchical"), -2)
            ClusterWriter(store).bk_ledger(lid, pulsar_custom_metadata(ACME), state="OPEN")
    port = free_port()
    proc = d.daemon(port)
    api = f"http://127.0.0.1:{port}/admin/v2"
    try:
        wait_until(lambda: answers(f"http://127.0.0.1:{port}/healthz"), 60, "the daemon", proc=proc)

        def inflight() -> int:
            with urllib.request.urlopen(f"{api}/broker-stats/estimated-inflight-deletion-ledger-count",
                                        timeout=10) as answer:
                return json.loads(answer.read())

        wait_until(lambda: inflight() == 3, 90, "the unscoped in-flight estimate counting acme's RETRY", proc=proc)
        with urllib.request.urlopen(f"{api}/ledger-deletion/dlq", timeout=30) as answer:
            assert [e["messageId"] for e in json.loads(answer.read())] == [parked]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert d.present(71, 72, 73) == [71, 72, 73]
