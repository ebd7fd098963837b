"""``scan-orphans --enqueue``, then the daemon drains: the orphans are gone, everything else intact.

Real components throughout, through the CLI as an operator runs it: the embedded
SQLite store, the embedded pulsar-lite broker, PySpark in local mode.  The scan that checks
the drain left nothing runs the same scan in this process, on the suite's Spark session
(``tests.support.spark_cluster.rescan``): a CLI scan costs a JVM of its own, and the CLI's
way in is tested just before.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata, schema_custom_metadata
from metastore import open_store
from metastore.formats import Position, ledger_path
from tests.support.cli_runner import run_cli
from tests.support.harness import free_port
from tests.support.spark_cluster import rescan

TOPIC = "persistent://t/ns/orders"
GONE = "persistent://t/ns/deleted-long-ago"
DAY_MS = 86_400_000


def _seed(data_dir: Path) -> dict[str, list[int]]:
    """A cluster with live references and with ledgers nothing references."""
    old = int(time.time() * 1000) - 3 * DAY_MS
    data_dir.mkdir()
    with open_store(f"sqlite:///{data_dir / 'metadata.db'}") as store:
        w = ClusterWriter(store)
        w.ensure_layout()
        for lid in (1, 2, 3, 4, 5):  # listed, a cursor ledger, a schema ledger: all in use
            meta = pulsar_custom_metadata(TOPIC, cursor="sub" if lid == 4 else None)
            w.bk_ledger(lid, schema_custom_metadata(TOPIC) if lid == 5 else meta, ctime_ms=old)
        w.managed_ledger(TOPIC, [1, 2, 3])
        w.cursor(TOPIC, "sub", Position(3, -1), cursors_ledger_id=4)
        w.schema(TOPIC, [5])
        for lid in (10, 11):  # orphans: their topic's metadata is gone
            w.bk_ledger(lid, pulsar_custom_metadata(GONE), ctime_ms=old)
        w.bk_ledger(12, pulsar_custom_metadata(GONE, cursor="old-sub"), ctime_ms=old)  # an orphan cursor ledger
        w.bk_ledger(13, schema_custom_metadata(GONE), ctime_ms=old)  # an orphan schema ledger
        w.bk_ledger(20, pulsar_custom_metadata(GONE))  # unreferenced but young: not yet
        w.bk_ledger(21, {"application": "someone-else"}, ctime_ms=old)  # not Pulsar's
        w.bk_ledger(22, pulsar_custom_metadata(GONE), state="OPEN", ctime_ms=old)  # still being written
    return {"kept": [1, 2, 3, 4, 5, 20, 21, 22], "orphans": [10, 11, 12, 13]}


def _present(data_dir: Path, ids: list[int]) -> list[int]:
    with open_store(f"sqlite:///{data_dir / 'metadata.db'}") as store:
        return [lid for lid in ids if store.get(ledger_path("/ledgers", lid, "hierarchical")) is not None]


@pytest.mark.slow
def test_scan_enqueue_then_the_daemon_deletes_exactly_the_orphans(tmp_path: Path, spark: SparkSession) -> None:
    data_dir = tmp_path / "d"
    ledgers = _seed(data_dir)
    out = tmp_path / "out"
    common = ["--data-dir", str(data_dir), "--json"]

    dry = run_cli("scan-orphans", "--min-age", "1d", "--output", str(out), *common, timeout=300)
    assert dry.returncode == 0, dry.stderr
    summary = json.loads(dry.stdout)
    assert (summary["orphanLedgers"], summary["missingLedgers"], summary["enqueued"]) == (4, 0, None)
    assert {p.name for p in out.iterdir()} >= {"orphan_ledgers.parquet", "missing_ledgers.parquet", "report.html",
                                               "summary.json"}
    assert _present(data_dir, ledgers["orphans"]) == ledgers["orphans"]  # a dry run sends nothing

    sent = run_cli("scan-orphans", "--min-age", "1d", "--enqueue", *common, timeout=300)
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout)["enqueued"] == {"sent": 4, "skipped": {},
                                                   "byKind": {"data": 2, "cursor": 1, "schema": 1}}

    drained = run_cli("run", "--exit-when-idle", "--max-wait", "60", "--admin-address", f"127.0.0.1:{free_port()}",
                      "--data-dir", str(data_dir), timeout=180)
    assert drained.returncode == 0, drained.stderr
    assert _present(data_dir, ledgers["orphans"]) == []
    assert _present(data_dir, ledgers["kept"]) == ledgers["kept"]

    assert rescan(spark, data_dir)["orphanLedgers"] == 0


@pytest.mark.slow
def test_enqueue_refuses_when_nothing_references_anything(tmp_path: Path) -> None:
    """A store with BookKeeper's ledgers but none of Pulsar's metadata is far likelier the wrong
    --metadata-store than a cluster whose every topic is gone: report, never enqueue."""
    data_dir = tmp_path / "d"
    data_dir.mkdir()
    with open_store(f"sqlite:///{data_dir / 'metadata.db'}") as store:
        w = ClusterWriter(store)
        w.ensure_layout()
        for lid in (1, 2, 3):
            w.bk_ledger(lid, pulsar_custom_metadata(TOPIC), ctime_ms=int(time.time() * 1000) - 3 * DAY_MS)
    refused = run_cli("scan-orphans", "--enqueue", "--data-dir", str(data_dir), timeout=300)
    # refused before Spark starts: one line, no traceback, no Spark
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("error: found no references to any ledger") and "nothing was sent" in last
    assert "the scan did not start" in last and "Spark" not in refused.stderr.replace(last, "")
    assert _present(data_dir, [1, 2, 3]) == [1, 2, 3]
