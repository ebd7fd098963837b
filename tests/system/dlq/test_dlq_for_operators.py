"""The DLQ for operators, through the real CLI and the real daemon on the embedded broker.

Listing must take nothing (two listings at once, or a listing beside a consumer that holds
the messages, all see every parked request); purge and requeue act on exactly the requests
the operator selected among those listed, by id (``L:E``) or filter.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pulsar

from deletion_service.embedded.broker import EmbeddedBroker
from tests.support.daemon_process import answers
from tests.support.harness import free_port, wait_until
from tests.support.parked_requests import PARKED, TOPICS, Parked, parked

__all__ = ["parked"]  # the fixture: a data dir whose DLQ holds four parked requests


def _ids(entries: list[dict]) -> list[str]:
    return [e["messageId"] for e in entries]


def test_listing_takes_nothing_from_a_consumer_holding_the_dlq(parked: Parked) -> None:
    client = pulsar.Client(parked.service_url)
    try:
        holder = client.subscribe(TOPICS.dlq, TOPICS.dlq_subscription, consumer_type=pulsar.ConsumerType.Shared,
                                  initial_position=pulsar.InitialPosition.Earliest)
        held = [holder.receive(5000) for _ in PARKED]  # every parked message dispatched to it, unacked
        assert len(held) == len(PARKED)
        assert _ids(parked.listed()) == list(parked.ids.values())
        with ThreadPoolExecutor(2) as pool:  # two operators at once
            both = list(pool.map(lambda _: parked.listed(), range(2)))
        assert [_ids(b) for b in both] == [list(parked.ids.values())] * 2
        holder.close()
    finally:
        client.close()
    entries = parked.listed()
    assert [e["reason"] for e in entries] == list(PARKED.values())
    assert entries[-1]["request"] is None and entries[-1]["payloadBase64"]
    assert all(":" in i and "(" not in i for i in _ids(entries))  # L:E, as operators type it back


def _remaining_on_subscription(service_url: str) -> list[bytes]:
    """What the DLQ subscription itself still holds (the backlog the dlq_size gauge counts)."""
    client = pulsar.Client(service_url)
    try:
        consumer = client.subscribe(TOPICS.dlq, TOPICS.dlq_subscription, consumer_type=pulsar.ConsumerType.Shared)
        out = []
        while True:
            try:
                out.append(consumer.receive(1500).data())
            except pulsar.Timeout:
                return out
    finally:
        client.close()


def test_purge_by_id_settles_exactly_that_request(parked: Parked) -> None:
    r = parked.cli("dlq", "purge", parked.ids[2], "--yes", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"purged": 1, "messageIds": [parked.ids[2]]}
    assert _ids(parked.listed()) == [parked.ids[k] for k in (1, 3, 9)]
    remaining = _remaining_on_subscription(parked.service_url)
    assert len(remaining) == 3 and not any(b'"ledgerId":2' in m.replace(b" ", b"") for m in remaining)


def test_requeue_by_reason_moves_only_those_and_keeps_the_rest(parked: Parked) -> None:
    r = parked.cli("dlq", "requeue", "--reason", "delete-failed", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"requeued": 2, "messageIds": [parked.ids[1], parked.ids[2]],
                                    "keptUndecodable": 0, "keptRefused": []}
    assert _ids(parked.listed()) == [parked.ids[3], parked.ids[9]]
    # a refusal retrying cannot change stays parked on a filter; named by id, it goes back
    r = parked.cli("dlq", "requeue", "--reason", "cannot-verify", "--json")
    assert json.loads(r.stdout) == {"requeued": 0, "messageIds": [], "keptUndecodable": 0,
                                    "keptRefused": [parked.ids[3]]}
    r = parked.cli("dlq", "requeue", parked.ids[3], "--json")
    assert json.loads(r.stdout)["messageIds"] == [parked.ids[3]]
    assert _ids(parked.listed()) == [parked.ids[9]]
    requeued = []
    client = pulsar.Client(parked.service_url)
    try:
        for topic in TOPICS.partition_topics:
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            while True:
                try:
                    requeued.append(json.loads(reader.read_next(500).data())["ledgerId"])
                except pulsar.Timeout:
                    break
            reader.close()
    finally:
        client.close()
    assert sorted(requeued) == [1, 2, 3]
    undecodable = parked.cli("dlq", "requeue", parked.ids[9], "--json")
    assert json.loads(undecodable.stdout)["keptUndecodable"] == 1
    assert _ids(parked.listed("--reason", "invalid-request")) == [parked.ids[9]]


def test_purge_needs_a_selection_and_changes_nothing_on_a_stale_id(parked: Parked) -> None:
    parked.cli("dlq", "purge", "--yes").assert_one_line_error(2, "say which requests", "--all")
    parked.cli("dlq", "purge", "--all", "--reason", "x", "--yes").assert_one_line_error(2, "--all")
    parked.cli("dlq", "purge", "--older-than", "soon", "--yes").assert_one_line_error(2, "--older-than")
    parked.cli("dlq", "purge", parked.ids[1], "777:7", "--yes").assert_one_line_error(
        1, "not in the DLQ: 777:7", "nothing was changed")
    parked.cli("dlq", "purge", "not-an-id", "--yes").assert_one_line_error(1, "not-an-id")
    assert _ids(parked.listed()) == list(parked.ids.values())
    r = parked.cli("dlq", "list", "--limit", "-1")
    assert r.returncode == 2 and "-1" in r.stderr
    assert len(parked.listed("--limit", "2")) == 2


def test_purge_by_age_and_everything(parked: Parked) -> None:
    r = parked.cli("dlq", "purge", "--older-than", "1h", "--yes", "--json")
    assert json.loads(r.stdout)["purged"] == 0  # all parked just now
    r = parked.cli("dlq", "purge", "--all", "--yes", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["purged"] == len(PARKED)
    assert parked.listed() == []
    assert _remaining_on_subscription(parked.service_url) == []  # the settlement markers were acked too


def test_the_daemon_endpoint_and_the_cli_list_at_once_and_docs_are_served(parked: Parked) -> None:
    EmbeddedBroker(parked.data_dir).stop()  # the daemon owns its broker
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "deletion_service.cli.main", "run", "--data-dir",
                             str(parked.data_dir), "--admin-address", f"127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/admin/v2/ledger-deletion/dlq"

    def endpoint() -> list[str]:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return _ids(json.loads(answer.read()))

    try:
        wait_until(lambda: answers(f"http://127.0.0.1:{port}/healthz"), 60, "the admin API", proc)
        with ThreadPoolExecutor(3) as pool:
            seen = [pool.submit(endpoint), pool.submit(endpoint), pool.submit(lambda: _ids(parked.listed()))]
            assert [f.result() for f in seen] == [list(parked.ids.values())] * 3
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/docs", timeout=10) as answer:
            page = answer.read().decode()
            assert answer.headers["Content-Type"].startswith("text/html")
        assert "/openapi.json" in page and "GET /admin/v2/ledger-deletion/dlq" in page and "<script" not in page
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


