"""DLQ listings stay exact while everything reads the DLQ at once, on real processes: the real daemon
(``run``, namespace scope, its DLQ gauge refreshing), the real CLI (several ``dlq list --json`` and a
``dlq requeue`` at the same moment), the embedded pulsar-lite broker and a SQLite metadata store.

Every listing names each parked request exactly once, a requeued one at most once, and the daemon's
``dlq_size`` gauge settles on the listing's count.  An unscoped listing reads the DLQs of many
namespaces side by side, not one empty DLQ after another (counted through the broker interface).
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from deletion_service.broker.interface import BrokerClient, Outgoing, Received
from deletion_service.broker.pulsar_client import PulsarBrokerClient
from deletion_service.cluster_writer import ClusterWriter
from deletion_service.dlq.marker import MarkerKey
from deletion_service.dlq.operations import list_dlq
from deletion_service.protocol.topics import DeletionTopics, namespace_topics
from metastore import open_store
from tests.support.cli_runner import CliResult
from tests.support.daemon_process import answers
from tests.support.dlq_deployment import CLUSTER, Deployment, deployed
from tests.support.harness import free_port, wait_until
from tests.support.metrics_scrape import metric, scrape

NAMESPACES = [f"t{i}/ns" for i in range(6)]
FULL = namespace_topics(NAMESPACES[0], CLUSTER)
PARKED = 2500
REQUEUED = 10
LISTINGS = 3
ROUNDS = 2


def _request(ledger_id: int) -> bytes:
    return json.dumps({"topicName": "persistent://t0/ns/orders", "ledgerComponent": "MANAGED_LEDGER",
                       "ledgerType": "LEDGER", "ledgerId": ledger_id, "markedAt": 1, "reason": "manual"}).encode()


def park(service_url: str, topics: DeletionTopics, count: int) -> list[str]:
    """``count`` requests parked in ``topics``' DLQ as the daemon parks them (subscription first); their ids."""
    client = PulsarBrokerClient(service_url, long_lived=False)
    try:
        client.ensure_subscription(topics.dlq, topics.dlq_subscription)
        producer = client.producer(topics.dlq)
        receipts = producer.send_many([Outgoing(_request(n), {"reason": "delete-failed", "lastError": "boom"})
                                       for n in range(1, count + 1)])
        producer.close()
    finally:
        client.close()
    assert all(isinstance(r, str) for r in receipts), receipts[:3]
    return [":".join(str(r).strip("()").split(",")[:2]) for r in receipts]


@pytest.fixture
def namespaced(tmp_path: Path) -> Iterator[Deployment]:
    """Namespace scope over six namespaces; no ledgers exist, so a requeued request settles as absent."""
    for d in deployed(tmp_path, 'ledgerDeletionTopicScope = "namespace"\nminLedgerAgeSeconds = 0\n'):
        with open_store(f"sqlite:///{d.data_dir / 'metadata.db'}") as store:
            writer = ClusterWriter(store)
            writer.ensure_layout()
            for ns in NAMESPACES:
                writer.managed_ledger(f"persistent://{ns}/orders", [])
        yield d


def _at_once(d: Deployment, commands: list[tuple[str, ...]]) -> list[CliResult]:
    """The CLI commands started together (each its own process), their results in order."""
    results: list[CliResult | None] = [None] * len(commands)
    start = threading.Barrier(len(commands))

    def run(k: int) -> None:
        start.wait()
        results[k] = d.cli(*commands[k], timeout=180)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(commands))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [r for r in results if r is not None]


def _dlq_size(port: int) -> float | None:
    return metric(scrape(port), "pulsar_ledger_deletion_dlq_size")


def _gauge_until(port: int, expected: int, timeout_s: float) -> list[float | None]:
    """``dlq_size`` as read once a second until it reads ``expected`` or ``timeout_s`` passed: every reading."""
    read = [_dlq_size(port)]
    deadline = time.monotonic() + timeout_s
    while read[-1] != expected and time.monotonic() < deadline:
        time.sleep(1.0)
        read.append(_dlq_size(port))
    return read


def test_listings_the_gauge_and_a_requeue_at_once_each_see_every_parked_request_once(namespaced: Deployment) -> None:
    d = namespaced
    ids = park(d.service_url(), FULL, PARKED)
    port = free_port()
    proc = d.daemon(port)
    try:
        wait_until(lambda: answers(f"http://127.0.0.1:{port}/healthz"), 60, "the daemon", proc=proc)
        wait_until(lambda: _dlq_size(port) is not None, 120, "the daemon's first dlq_size reading", proc=proc)
        gone: set[str] = set()
        for round_ in range(ROUNDS):
            chosen = ids[round_ * REQUEUED:(round_ + 1) * REQUEUED]
            results = _at_once(d, [("--json", "dlq", "list")] * LISTINGS + [("--json", "dlq", "requeue", *chosen)])
            *listings, requeued = results
            assert requeued.returncode == 0, requeued.stderr[-2000:]
            assert json.loads(requeued.stdout)["requeued"] == REQUEUED
            for r in listings:
                assert r.returncode == 0, r.stderr[-2000:]
                seen = Counter(e["messageId"] for e in json.loads(r.stdout))
                twice = {i: n for i, n in seen.items() if n > 1}
                assert twice == {}, f"{len(twice)} parked request(s) listed more than once, e.g. {list(twice)[:5]}"
                assert set(ids) - gone - set(chosen) <= set(seen), "a parked request is missing from a listing"
                assert set(seen) <= set(ids) - gone
            gone |= set(chosen)
        final = d.listed()
        assert sorted(e["messageId"] for e in final) == sorted(set(ids) - gone)
        read = _gauge_until(port, len(final), 120)
        assert read[-1] == len(final), \
            f"dlq_size read {sorted(set(read), key=str)} over two minutes, never the listing's {len(final)}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


class CountingReads(BrokerClient):
    """The real client, with every ``read_all`` counted and how many ran at the same moment."""

    def __init__(self, real: BrokerClient) -> None:
        self.real = real
        self.reads: Counter[str] = Counter()
        self.running = 0
        self.most_at_once = 0
        self._lock = threading.Lock()

    def read_all(self, topic: str) -> list[Received]:
        with self._lock:
            self.reads[topic] += 1
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        try:
            return self.real.read_all(topic)
        finally:
            with self._lock:
                self.running -= 1

    def producer(self, topic: str):  # noqa: ANN201 - the real client's
        return self.real.producer(topic)

    def consumer(self, topics: list[str], subscription: str, receiver_queue_size: int = 1000):  # noqa: ANN201
        return self.real.consumer(topics, subscription, receiver_queue_size)

    def ensure_subscription(self, topic: str, subscription: str) -> None:
        self.real.ensure_subscription(topic, subscription)

    def partitions(self, topic: str) -> int:
        return self.real.partitions(topic)

    def close(self) -> None:
        self.real.close()


def test_an_unscoped_listing_reads_empty_dlqs_side_by_side_each_once(pulsar_broker) -> None:  # noqa: ANN001
    tenant = f"wide{time.time_ns()}"
    spread = [namespace_topics(f"{tenant}/ns{i}", CLUSTER) for i in range(48)]
    parked = {spread[7].dlq: park(pulsar_broker.service_url, spread[7], 3),
              spread[30].dlq: park(pulsar_broker.service_url, spread[30], 2)}
    broker = CountingReads(PulsarBrokerClient(pulsar_broker.service_url, long_lived=False))
    try:
        listed = list_dlq(broker, spread, MarkerKey.read(None))
    finally:
        broker.close()
    assert sorted((e.topic, e.message_id) for e in listed) == sorted(
        (topic, i) for topic, ids in parked.items() for i in ids)
    assert broker.reads == Counter({t.dlq: 1 for t in spread}), "each DLQ in scope is read exactly once"
    assert broker.most_at_once > 1, "empty DLQs were read one after another"
