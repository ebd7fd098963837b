"""Issue 27's acceptance scenario, through the real CLI on the embedded defaults (SQLite store,
pulsar-lite broker, filesystem offloader, Spark local): ``scan-orphans --enqueue`` then
``run --exit-when-idle`` reclaims exactly the orphans of every kind, and never a live one.

* compacted ledgers: a live one (named by the ``__compaction`` cursor) and an orphan whose topic
  was deleted (upstream leak #21745);
* delayed-delivery bucket ledgers: a live one (named by a cursor property) and an orphan whose
  subscription is gone (#22802);
* an ordinary orphan data ledger;
* then finding 7's scan side: the objects a failed earlier offload left under a uuid no context
  names, while its ledger is still listed with a later offload's uuid.

The last scan of each, after the drain, runs in this process on the suite's Spark session
(``rescan``): the CLI's scan is tested just before it, and each CLI scan costs a JVM.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from deletion_service.testing.offload_objects import build_mapfile_data, pulsar_ledger_metadata
from metastore import ANY, MetadataStore, open_store
from metastore.formats import (
    LedgerInfo,
    ManagedCursorInfo,
    OffloadContext,
    Position,
    cursor_path,
    encode_cursor,
    ledger_path,
    managed_ledger_name,
)
from offloaders.interface import java_uuid
from tests.support.cli_runner import run_cli
from tests.support.harness import free_port
from tests.support.spark_cluster import rescan

TOPIC = "persistent://t/ns/orders"
GONE = "persistent://t/ns/deleted-long-ago"
DAY_MS = 86_400_000
OLD_MS = int(time.time() * 1000) - 3 * DAY_MS
LIVE = {1: "data", 2: "data", 4: "delayed-bucket", 5: "compacted"}
ORPHANS = {6: "compacted", 7: "delayed-bucket", 8: "data"}


def _bucket(topic: str, cursor: str) -> dict[str, str]:
    """What a PIP-195 delayed-delivery tracker stamps on a bucket snapshot ledger (spelt out here,
    so the scenario reads as Pulsar writes it)."""
    return {"application": "pulsar", "component": "delayed-index-bucket",
            "pulsar/managed-ledger": managed_ledger_name(topic), "pulsar/cursor": cursor}


def _compacted(topic: str) -> dict[str, str]:
    return {"application": "pulsar", "component": "compacted-ledger", "pulsar/compactedTopic": topic}


def _cursor(store: MetadataStore, topic: str, name: str, properties: dict[str, int] | None = None,
            cursor_properties: dict[str, str] | None = None) -> None:
    """A cursor whose state lives in the metadata store (``cursorsLedgerId`` −1)."""
    info = ManagedCursorInfo(-1, Position(1, 0), properties=properties or {},
                             cursor_properties=cursor_properties or {}, last_active=OLD_MS)
    store.put(cursor_path(topic, name), encode_cursor(info), ANY)


def _seed(data_dir: Path) -> None:
    data_dir.mkdir()
    with open_store(f"sqlite:///{data_dir / 'metadata.db'}") as store:
        w = ClusterWriter(store)
        w.ensure_layout()
        for lid in (1, 2, 8):
            w.bk_ledger(lid, pulsar_custom_metadata(GONE if lid == 8 else TOPIC), ctime_ms=OLD_MS)
        w.bk_ledger(4, _bucket(TOPIC, "delayed"), ctime_ms=OLD_MS)
        w.bk_ledger(5, _compacted(TOPIC), ctime_ms=OLD_MS)
        w.bk_ledger(6, _compacted(GONE), ctime_ms=OLD_MS)  # its topic was deleted (#21745)
        w.bk_ledger(7, _bucket(TOPIC, "gone-sub"), ctime_ms=OLD_MS)  # its subscription is gone (#22802)
        w.managed_ledger(TOPIC, [1, 2])
        _cursor(store, TOPIC, "delayed", cursor_properties={"#pulsar.internal.delayed.bucket_1_2": "4"})
        _cursor(store, TOPIC, "__compaction", properties={"CompactedTopicLedger": 5})


def _present(data_dir: Path, ids: list[int]) -> list[int]:
    with open_store(f"sqlite:///{data_dir / 'metadata.db'}") as store:
        return [lid for lid in ids if store.get(ledger_path("/ledgers", lid, "hierarchical")) is not None]


def _scan(data_dir: Path, *extra: str) -> dict:
    done = run_cli("scan-orphans", "--min-age", "1d", *extra, "--data-dir", str(data_dir), "--json", timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _drain(data_dir: Path) -> None:
    drained = run_cli("run", "--exit-when-idle", "--max-wait", "60", "--admin-address", f"127.0.0.1:{free_port()}",
                      "--data-dir", str(data_dir), timeout=180)
    assert drained.returncode == 0, drained.stderr


def _dlq(data_dir: Path) -> list:
    listed = run_cli("dlq", "list", "--data-dir", str(data_dir), "--json", timeout=120)
    assert listed.returncode == 0, listed.stderr
    return json.loads(listed.stdout)


@pytest.mark.slow
def test_every_kind_of_orphan_is_reclaimed_and_no_live_ledger_is_counted(tmp_path: Path,
                                                                          spark: SparkSession) -> None:
    data_dir = tmp_path / "d"
    _seed(data_dir)
    out = tmp_path / "out"

    dry = _scan(data_dir, "--output", str(out))
    assert (dry["orphanLedgers"], dry["missingLedgers"], dry["enqueued"]) == (3, 0, None)
    assert dry["orphanLedgersByKind"] == {"data": 1, "cursor": 0, "schema": 0, "compacted": 1, "delayed-bucket": 1,
                                          "other": 0}
    assert json.loads((out / "summary.json").read_text())["orphanLedgersByKind"] == dry["orphanLedgersByKind"]
    report = (out / "report.html").read_text()
    assert "Compacted-topic ledgers" in report and "Delayed-delivery buckets" in report

    sent = _scan(data_dir, "--enqueue")
    assert sent["enqueued"] == {"sent": 3, "skipped": {}, "byKind": {"compacted": 1, "delayed-bucket": 1, "data": 1}}
    _drain(data_dir)

    assert _present(data_dir, sorted(ORPHANS)) == []
    assert _present(data_dir, sorted(LIVE)) == sorted(LIVE)
    assert _dlq(data_dir) == []
    assert rescan(spark, data_dir)["orphanLedgers"] == 0


@pytest.mark.slow
def test_a_failed_offloads_leftovers_are_reclaimed_and_the_live_copy_kept(tmp_path: Path,
                                                                          spark: SparkSession) -> None:
    """Ledger 2 is listed, offloaded under ``live``; a failed earlier attempt left its objects under
    ``stale``, which no context names.  The scan reports them, enqueues an OFFLOAD_LEDGER request
    for (2, stale) at the place it found them, and the daemon deletes them: nothing else."""
    data_dir = tmp_path / "d"
    data_dir.mkdir()
    base = (data_dir / "offload").resolve()
    live, stale = java_uuid(2, 2), java_uuid(2, 99)
    ml = managed_ledger_name(TOPIC)
    with open_store(f"sqlite:///{data_dir / 'metadata.db'}") as store:
        w = ClusterWriter(store)
        w.ensure_layout()
        for lid in (1, 2):
            w.bk_ledger(lid, pulsar_custom_metadata(TOPIC), ctime_ms=OLD_MS)
        context = OffloadContext(uid_msb=2, uid_lsb=2, complete=True, driver_name="filesystem",
                                 driver_metadata={"storageBasePath": str(base)})
        w.managed_ledger(TOPIC, [1, LedgerInfo(2, entries=10, size=1024, offload_context=context)])
    data = build_mapfile_data(pulsar_ledger_metadata(ml, entries=10, size=1024, ctime_ms=OLD_MS))
    for uid in (live, stale):
        mapfile = base / ml / f"2-{uid}"
        mapfile.mkdir(parents=True)
        (mapfile / "data").write_bytes(data)
        (mapfile / "index").write_bytes(b"SEQ\x06index")
        for path in (mapfile / "data", mapfile / "index", mapfile):
            os.utime(path, (OLD_MS / 1000, OLD_MS / 1000))

    sent = _scan(data_dir, "--enqueue")
    assert (sent["orphanLedgers"], sent["orphanOffloadedObjects"]) == (0, 1)
    assert sent["enqueued"] == {"sent": 1, "skipped": {}, "byKind": {"offloaded": 1}}
    _drain(data_dir)

    assert not (base / ml / f"2-{stale}").exists()
    assert (base / ml / f"2-{live}" / "data").read_bytes() == data
    assert _present(data_dir, [1, 2]) == [1, 2]
    assert _dlq(data_dir) == []
    assert rescan(spark, data_dir)["orphanOffloadedObjects"] == 0
