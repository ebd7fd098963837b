"""A producer on RETRY cannot write the operator's view: a RETRY message claiming "held through an
outage", with words of its producer's choosing, is shown as a request held for a reason this tool did
not record, never as an outage and never with those words; a request the daemon itself holds keeps
its reason and words.  Real processes: the daemon (``run``) on its embedded broker and SQLite store,
and a plain pulsar-client producer."""

from __future__ import annotations

import json
import signal
import time
import urllib.request
from pathlib import Path

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from deletion_service.config import DeletionConfig
from deletion_service.embedded.broker import EmbeddedBroker
from deletion_service.protocol.topics import DeletionTopics
from metastore import open_store
from tests.support.cli_runner import run_cli
from tests.support.daemon_process import data_dir, start_daemon  # noqa: F401 - the fixture
from tests.support.harness import free_port, wait_until
from tests.support.metrics_scrape import metric
from tests.support.replica_tools import request, send_raw

TOPIC = "persistent://t/ns/orders"
FORGED_WHY = "ZooKeeper quorum lost - run `ledger-deletion dlq purge --all` now"


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def test_a_forged_hold_label_is_shown_as_unknown_and_its_words_never(data_dir: Path) -> None:  # noqa: F811
    data_dir.mkdir()
    with open_store(f"sqlite:///{data_dir / 'metadata.db'}") as store:
        w = ClusterWriter(store)
        w.ensure_layout()
        w.bk_ledger(5, pulsar_custom_metadata(TOPIC), state="OPEN", ctime_ms=int(time.time() * 1000) - 3 * 86_400_000)
    queued = data_dir.parent / "open.jsonl"
    queued.write_text(request(TOPIC, 5).decode() + "\n")  # an orphan whose ledger never closed: held, not yet
    assert run_cli("enqueue", "--from-file", str(queued), "--data-dir", str(data_dir)).returncode == 0
    port = free_port()
    proc = start_daemon(data_dir, port=port)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: (data_dir / "broker" / "subscriptions.json").exists(), 60, "the daemon", proc=proc)
        info = EmbeddedBroker(data_dir).read_info()
        assert info is not None
        retry = DeletionTopics.from_config(DeletionConfig()).retry
        send_raw(info.serviceUrl, retry, request(TOPIC, 6), {
            "DELAY_TIME": "3600000", "RECONSUMETIMES": "1", "REAL_TOPIC": retry,
            "ledgerDeletionHeldFor": "outage", "ledgerDeletionHeldWhy": FORGED_WHY,
            "ledgerDeletionHeldSeal": "0" * 64})

        def held() -> dict[str, int]:
            return {g["reason"]: g["count"] for g in json.loads(_get(f"{base}/status"))["inHand"]["heldBy"]}

        wait_until(lambda: sum(held().values()) == 2, 60, "both requests held", proc=proc, interval=0.5)
        groups = json.loads(_get(f"{base}/status"))["inHand"]["heldBy"]
        assert {g["reason"]: g["count"] for g in groups} == {"not-yet": 1, "unknown": 1}, groups
        assert "OPEN" in next(g["example"] for g in groups if g["reason"] == "not-yet")  # ours keeps its words
        assert FORGED_WHY not in json.dumps(groups)
        text = _get(f"{base}/metrics")
        assert metric(text, 'pulsar_ledger_deletion_held{reason="outage"}') == 0
        assert metric(text, 'pulsar_ledger_deletion_held{reason="unknown"}') == 1
        shown = run_cli("status", "--admin-address", f"127.0.0.1:{port}", env={"COLUMNS": "200"})
        assert shown.returncode == 0 and "quorum" not in shown.stdout and "outage" not in shown.stdout, shown.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
