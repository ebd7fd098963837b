"""The daemon's outcome lines, through the real ``ledger-deletion run`` on the session's ZooKeeper and
pulsar-lite: routine outcomes (deleted, absent) are one INFO line per batch, topic and outcome naming
every ledger; dead letters one WARNING line per batch and reason."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import pulsar

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from metastore import open_store
from metastore.formats import ledger_path
from tests.support.cli_runner import run_cli
from tests.support.harness import PulsarLiteBroker, free_port, wait_until
from tests.support.metrics_scrape import metric

TOPIC = "persistent://lines/ns/orders"
DELETED = range(1, 41)
ABSENT = range(900, 903)  # requests for ledgers that do not exist: settled absent


def _requests(path: Path, ids: range) -> Path:
    path.write_text("".join(json.dumps({"topicName": TOPIC, "ledgerComponent": "MANAGED_LEDGER",
                                        "ledgerType": "LEDGER", "ledgerId": lid, "reason": "trim"}) + "\n"
                            for lid in ids))
    return path


def _acked(port: int, outcome: str) -> float:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:  # not answering yet
        return -1.0
    return metric(text, f'pulsar_ledger_deletion_acked_total{{outcome="{outcome}"}}') or 0.0


def test_a_batch_of_deletions_is_one_line_naming_every_ledger_and_a_dead_letter_is_counted_in_its_own(
        zookeeper, pulsar_broker: PulsarLiteBroker, tmp_path: Path) -> None:  # noqa: ANN001
    url = f"{zookeeper.url}/lines-{uuid.uuid4().hex[:8]}"
    with open_store(url) as store:
        writer = ClusterWriter(store)
        writer.ensure_layout()
        writer.managed_ledger(TOPIC, [1000])  # its current ledger: those below were trimmed
        for lid in DELETED:
            writer.bk_ledger(lid, pulsar_custom_metadata(TOPIC))
    topic = f"persistent://pulsar/system/__lines-{uuid.uuid4().hex[:8]}"
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'ledgerDeletionTopic = "{topic}"\n')
    common = ["--metadata-store", url, "--broker-url", pulsar_broker.service_url, "--config", str(cfg)]
    for name, ids in (("d", DELETED), ("a", ABSENT)):  # all queued before the daemon starts: few batches
        r = run_cli(*common, "enqueue", "--from-file", str(_requests(tmp_path / f"{name}.jsonl", ids)))
        assert r.returncode == 0, r.stderr
    client = pulsar.Client(pulsar_broker.service_url)
    try:
        # undecodable: dead-lettered (pulsar-lite keeps no partitioned metadata: to a partition by name)
        client.create_producer(f"{topic}-partition-0").send(b"not a request")
    finally:
        client.close()
    port = free_port()
    daemon = subprocess.Popen([sys.executable, "-m", "deletion_service.cli.main", *common, "--data-dir",
                               str(tmp_path / "data"), "run", "--log-format", "json", "--admin-address",
                               f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: _acked(port, "deleted") == len(DELETED) and _acked(port, "absent") == len(ABSENT)
                   and _acked(port, "dlq") == 1, 90, "every request settled", proc=daemon, interval=0.5)
    finally:
        daemon.send_signal(signal.SIGTERM)
        err = daemon.communicate(timeout=60)[1]
        print("--- the daemon's log (last lines)\n" + "\n".join(err.splitlines()[-15:]))
    assert daemon.returncode == 0, err[-3000:]
    with open_store(url) as store:
        assert [lid for lid in DELETED if store.get(ledger_path("/ledgers", lid, "hierarchical"))] == []
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    for outcome, ids in (("deleted", DELETED), ("absent", ABSENT)):
        routine = [x for x in lines if x.get("outcome") == outcome]
        assert routine and all(x["level"] == "info" and "ledger" not in x for x in routine), routine  # no line each
        assert sorted(lid for x in routine for lid in x["ledgers"]) == list(ids)  # every ledger named, once
        assert len(routine) < len(ids), routine  # a batch's ledgers share a line
        for x in routine:  # the text names each id, so `grep -w 523` finds its line
            assert (x["topic"], x["ledgerType"], x["count"]) == (TOPIC, "LEDGER", len(x["ledgers"])), x
            said = (f"deleted {x['count']} ledger(s) of {TOPIC}" if outcome == "deleted" else
                    f"{x['count']} ledger(s) of {TOPIC} already gone from storage, nothing to delete (requests "
                    "acknowledged)")
            assert x["msg"] == f"{said}: " + ", ".join(map(str, x["ledgers"]))
    [dead] = [x for x in lines if x.get("outcome") == "dlq"]  # a line per batch and DLQ reason, with the count
    assert dead["level"] == "warning" and dead["count"] == 1 and dead["reason"] == "invalid-request", dead
    assert re.match(r"parked 1 request\(s\) in the DLQ, reason invalid-request \(first: .*\): message "
                    r"\d+:\d+(:\d+){0,2};", dead["msg"]), dead
