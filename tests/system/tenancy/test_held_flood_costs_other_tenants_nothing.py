"""One tenant's flood of requests for young ledgers, held by a real daemon on a real pulsar-lite (which
ignores delivery delays), costs another tenant's requests nothing: with the held set's memory full,
the flood is set aside unacked with the broker, not republished to RETRY in a loop.

Namespace scope, a held-set memory of 200 and 2,000 young requests from t0: 1,800 cannot be held in
memory.  Then t1 sends requests that fall due a few seconds later.  Judged by counts, never by time:
t1's ledgers are deleted; meanwhile the daemon received each of t0's requests twice (its request and
its one RETRY copy) and the broker stored one RETRY copy of each, however long the flood was held;
all 2,000 show as held; none was handed back.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from metastore import open_store
from metastore.formats import ledger_path
from tests.support.cli_runner import run_cli
from tests.support.harness import PulsarLiteBroker, free_port, wait_until
from tests.support.metrics_scrape import metric_sum

FLOOD_TOPIC, VICTIM_TOPIC = "persistent://t0/ns/orders", "persistent://t1/ns/orders"
FLOOD = range(10_000, 12_000)
VICTIM = range(20_000, 20_020)
MIN_AGE_S = 3600
HELD_IN_MEMORY = 200
DUE_AFTER_S = 8  # t1's ledgers become old enough this long after they are asked for


def _requests(path: Path, topic: str, ids: range) -> Path:
    path.write_text("".join(json.dumps({"topicName": topic, "ledgerComponent": "MANAGED_LEDGER",
                                        "ledgerType": "LEDGER", "ledgerId": lid, "reason": "manual"}) + "\n"
                            for lid in ids))
    return path


def _stop(daemon: subprocess.Popen) -> None:
    daemon.send_signal(signal.SIGTERM)
    try:
        daemon.wait(30)
    except subprocess.TimeoutExpired:
        daemon.kill()
        daemon.wait(10)


def _metrics(port: int) -> str:
    """The daemon's ``/metrics`` ("" while it is not serving yet)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            return r.read().decode()
    except urllib.error.URLError:
        return ""


def _present(url: str, ids: range) -> int:
    with open_store(url) as store:
        return sum(1 for lid in ids if store.get(ledger_path("/ledgers", lid, "hierarchical")) is not None)


def test_a_held_flood_is_set_aside_not_circled_and_another_tenants_due_requests_are_deleted(
        sqlite_url: str, own_pulsar_lite: PulsarLiteBroker, tmp_path: Path) -> None:
    broker = own_pulsar_lite
    with open_store(sqlite_url) as store:
        writer = ClusterWriter(store)
        writer.ensure_layout()
        for topic in (FLOOD_TOPIC, VICTIM_TOPIC):
            writer.managed_ledger(topic, [1])  # lists only an older ledger: the young ones are not superseded
        for lid in FLOOD:
            writer.bk_ledger(lid, pulsar_custom_metadata(FLOOD_TOPIC))  # created now: an hour too young
    cfg = tmp_path / "held.toml"
    cfg.write_text(f'ledgerDeletionTopicScope = "namespace"\nminLedgerAgeSeconds = {MIN_AGE_S}\n'
                   f'ledgerDeletionMaxHeldInMemory = {HELD_IN_MEMORY}\n')
    common = ["--metadata-store", sqlite_url, "--broker-url", broker.service_url, "--config", str(cfg),
              "--data-dir", str(tmp_path / "data")]
    sent = run_cli(*common, "enqueue", "--from-file", str(_requests(tmp_path / "flood.jsonl", FLOOD_TOPIC, FLOOD)))
    assert sent.returncode == 0, sent.stderr
    port = free_port()
    daemon = subprocess.Popen([sys.executable, "-m", "deletion_service.cli.main", *common, "run",
                               "--admin-address", f"127.0.0.1:{port}"],
                              stdout=subprocess.DEVNULL, stderr=open(tmp_path / "daemon.log", "w"))  # noqa: SIM115
    try:
        wait_until(lambda: metric_sum(_metrics(port), "pulsar_ledger_deletion_acked_total", outcome="reconsumed")
                   >= len(FLOOD), 180, "every flood request reconsumed to RETRY", daemon)

        with open_store(sqlite_url) as store:  # old enough DUE_AFTER_S from now
            writer = ClusterWriter(store)
            ctime = int((time.time() - MIN_AGE_S + DUE_AFTER_S) * 1000)
            for lid in VICTIM:
                writer.bk_ledger(lid, pulsar_custom_metadata(VICTIM_TOPIC), ctime_ms=ctime)
        sent = run_cli(*common, "enqueue", "--from-file",
                       str(_requests(tmp_path / "victim.jsonl", VICTIM_TOPIC, VICTIM)))
        assert sent.returncode == 0, sent.stderr
        wait_until(lambda: _present(sqlite_url, VICTIM) == 0, 180, "the other tenant's requests deleted", daemon)

        text = _metrics(port)
        received = metric_sum(text, "pulsar_ledger_deletion_received_total")
        assert received <= 2 * (len(FLOOD) + len(VICTIM)) + 50, \
            f"the daemon received {received:.0f} messages: the held flood kept coming back"
        assert metric_sum(text, "pulsar_ledger_deletion_held") == len(FLOOD), "every flood request is held, none lost"
        assert metric_sum(text, "pulsar_ledger_deletion_retry_handed_back_total") == 0
        def retry_writes() -> float:  # the broker's own count (its metrics lag by up to ~10 s)
            return metric_sum(broker.metrics_text(), "pulsar_in_messages_total", namespace="t0/ns",
                        topic="__ledger_deletion-RETRY")
        wait_until(lambda: retry_writes() >= len(FLOOD), 60, "the broker's count of RETRY copies")
        assert retry_writes() <= len(FLOOD) + 10, \
            f"the broker stored {retry_writes():.0f} RETRY copies of {len(FLOOD)} held requests"
        assert _present(sqlite_url, FLOOD) == len(FLOOD), "nothing young was deleted"
    finally:
        _stop(daemon)


def test_requests_set_aside_are_asked_back_as_they_fall_due_and_each_is_deleted_once(
        sqlite_url: str, own_pulsar_lite: PulsarLiteBroker, tmp_path: Path) -> None:
    """The other half: what was set aside comes back.  500 requests, 50 held in memory, their ledgers
    old enough a few seconds apart: every one is deleted, none is decided twice (a second decision would
    find its ledger absent), none is handed back, and the set-aside ones were asked for again."""
    flood = range(30_000, 30_500)
    with open_store(sqlite_url) as store:
        writer = ClusterWriter(store)
        writer.ensure_layout()
        writer.managed_ledger(FLOOD_TOPIC, [1])
        first_due_s = time.time() + 15
        for i, lid in enumerate(flood):  # one falls due every 20 ms, from 15 s on
            writer.bk_ledger(lid, pulsar_custom_metadata(FLOOD_TOPIC),
                             ctime_ms=int((first_due_s - MIN_AGE_S + i * 0.02) * 1000))
    cfg = tmp_path / "held.toml"
    cfg.write_text(f'ledgerDeletionTopicScope = "namespace"\nminLedgerAgeSeconds = {MIN_AGE_S}\n'
                   'ledgerDeletionMaxHeldInMemory = 50\n')
    common = ["--metadata-store", sqlite_url, "--broker-url", own_pulsar_lite.service_url, "--config", str(cfg),
              "--data-dir", str(tmp_path / "data")]
    port = free_port()
    daemon = subprocess.Popen([sys.executable, "-m", "deletion_service.cli.main", *common, "run",
                               "--admin-address", f"127.0.0.1:{port}"],
                              stdout=subprocess.DEVNULL, stderr=open(tmp_path / "daemon.log", "w"))  # noqa: SIM115
    try:
        sent = run_cli(*common, "enqueue", "--from-file", str(_requests(tmp_path / "due.jsonl", FLOOD_TOPIC, flood)))
        assert sent.returncode == 0, sent.stderr
        wait_until(lambda: _present(sqlite_url, flood) == 0, 240, "every request deleted", daemon)
        text = _metrics(port)
        assert metric_sum(text, "pulsar_ledger_deletion_acked_total", outcome="deleted") == len(flood)
        assert metric_sum(text, "pulsar_ledger_deletion_acked_total", outcome="absent") == 0, "one decided twice"
        assert metric_sum(text, "pulsar_ledger_deletion_retry_handed_back_total") == 0
        assert metric_sum(text, "pulsar_ledger_deletion_retry_asked_back_total") > 0
        wait_until(lambda: metric_sum(_metrics(port), "pulsar_ledger_deletion_held") == 0, 30, "nothing left held",
                   daemon)
    finally:
        _stop(daemon)
