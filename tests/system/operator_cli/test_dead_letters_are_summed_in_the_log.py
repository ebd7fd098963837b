"""A flood of dead letters, through the real ``ledger-deletion run`` on pulsar-lite and an SQLite store:
one WARNING line per batch and DLQ reason with the count and a few ids (each request's own line at
DEBUG), so ``status``'s recent problems keep room for everything else; requests for ledgers already
gone are said in words."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import pulsar

from deletion_service.cluster_writer import ClusterWriter
from metastore import open_store
from tests.support.cli_runner import run_cli
from tests.support.harness import PulsarLiteBroker, free_port, wait_until
from tests.support.metrics_scrape import metric

TOPIC = "persistent://flood/ns/orders"
UNDECODABLE = 40
GONE = range(900, 903)  # requests for ledgers that exist nowhere: settled absent


def _get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return r.read().decode()


def _acked(port: int, outcome: str) -> float:
    try:
        text = _get(port, "/metrics")
    except OSError:  # not answering yet
        return -1.0
    return metric(text, f'pulsar_ledger_deletion_acked_total{{outcome="{outcome}"}}') or 0.0


def test_a_flood_of_dead_letters_is_a_line_per_batch_and_reason_and_absent_requests_are_said_in_words(
        pulsar_broker: PulsarLiteBroker, sqlite_url: str, tmp_path: Path) -> None:
    with open_store(sqlite_url) as store:
        writer = ClusterWriter(store)
        writer.ensure_layout()
        writer.managed_ledger(TOPIC, [1000])
    topic = f"persistent://pulsar/system/__flood-{uuid.uuid4().hex[:8]}"
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'ledgerDeletionTopic = "{topic}"\n')
    common = ["--metadata-store", sqlite_url, "--broker-url", pulsar_broker.service_url, "--config", str(cfg)]
    gone = tmp_path / "gone.jsonl"
    gone.write_text("".join(json.dumps({"topicName": TOPIC, "ledgerComponent": "MANAGED_LEDGER",
                                        "ledgerType": "LEDGER", "ledgerId": lid, "reason": "trim"}) + "\n"
                            for lid in GONE))
    r = run_cli(*common, "enqueue", "--from-file", str(gone))  # makes the subscriptions, before the flood
    assert r.returncode == 0, r.stderr
    client = pulsar.Client(pulsar_broker.service_url)
    try:  # undecodable requests (pulsar-lite keeps no partitioned metadata: to a partition by name)
        producer = client.create_producer(f"{topic}-partition-0", batching_enabled=False)
        for i in range(UNDECODABLE):
            producer.send(f"not a request {i}".encode())
    finally:
        client.close()
    port = free_port()
    daemon = subprocess.Popen([sys.executable, "-m", "deletion_service.cli.main", *common, "--data-dir",
                               str(tmp_path / "data"), "run", "--log-format", "json", "--admin-address",
                               f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: _acked(port, "dlq") == UNDECODABLE and _acked(port, "absent") == len(GONE), 120,
                   "every request settled", proc=daemon, interval=0.5)
        problems = json.loads(_get(port, "/status"))["recentProblems"]
    finally:
        daemon.send_signal(signal.SIGTERM)
        err = daemon.communicate(timeout=60)[1]
    assert daemon.returncode == 0, err[-3000:]
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    dead = [x for x in lines if x.get("outcome") == "dlq"]
    assert sum(x["count"] for x in dead) == UNDECODABLE, dead  # every dead letter counted, once
    assert len(dead) < UNDECODABLE / 4, len(dead)  # a line per batch and reason, not per request
    for x in dead:
        assert x["level"] == "warning" and x["reason"] == "invalid-request", x
        assert x["msg"].startswith(f"parked {x['count']} request(s) in the DLQ, reason invalid-request"), x
        assert "message " in x["msg"] and "dlq list --reason invalid-request" in x["msg"], x  # a few ids, and where
    parked_problems = [p for p in problems if "in the DLQ" in p["msg"]]
    # one entry for the kind, counting its lines: room left for the rest
    assert len(parked_problems) == 1 and parked_problems[0]["repeated"] == len(dead), problems
    assert len(problems) < 20, problems
    absent = [x for x in lines if x.get("outcome") == "absent"]
    assert sorted(lid for x in absent for lid in x["ledgers"]) == list(GONE), absent
    for x in absent:
        assert x["msg"] == (f"{x['count']} ledger(s) of {TOPIC} already gone from storage, nothing to delete "
                            "(requests acknowledged): " + ", ".join(map(str, x["ledgers"]))), x
