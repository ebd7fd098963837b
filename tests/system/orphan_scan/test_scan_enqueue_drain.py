"""``scan-orphans`` then ``scan-orphans --enqueue`` then ``run --exit-when-idle``, through the real
CLI on the embedded defaults (SQLite store, pulsar-lite broker, filesystem offloader, Spark local):
exactly the orphans of every kind are reclaimed, and never a live ledger or object.

One world holds every sort of ledger the scan must tell apart, so the scenario costs two CLI
scans (each a JVM of its own) and one drain, not two of each per kind:

* references of every sort: a managed ledger's list, a cursor's cursor ledger, a schema's ledger;
  and the orphan of each (their topic's metadata is gone), beside ledgers to keep though nothing
  references them (young, not Pulsar's, still open);
* compacted ledgers: a live one (named by the ``__compaction`` cursor) and an orphan whose topic
  was deleted (upstream leak #21745);
* delayed-delivery bucket ledgers: a live one (named by a cursor property) and an orphan whose
  subscription is gone (#22802);
* the objects a failed earlier offload left under a uuid no offload context names, while their
  ledger is still listed with a later offload's uuid.

The scan after the drain runs in this process on the suite's Spark session (``rescan``): the CLI's
scan is tested just before it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata, schema_custom_metadata
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
EVENTS = "persistent://t/ns/events"  # compacted, with delayed delivery
OFFLOADED = "persistent://t/ns/offloaded"
GONE = "persistent://t/ns/deleted-long-ago"
DAY_MS = 86_400_000
OLD_MS = int(time.time() * 1000) - 3 * DAY_MS

#: the world of :func:`seed_references`: what it keeps and what is orphaned
REFERENCES_KEPT = [1, 2, 3, 4, 5, 20, 21, 22]
REFERENCES_ORPHANS = [10, 11, 12, 13]
#: compacted and bucket ledgers: live and orphaned, by kind
KINDS_LIVE = {31: "data", 32: "data", 34: "delayed-bucket", 35: "compacted"}
KINDS_ORPHANS = {36: "compacted", 37: "delayed-bucket", 38: "data"}
#: the offloaded ledger: 42 is listed and offloaded under ``LIVE_UUID``; a failed attempt left ``STALE_UUID``
OFFLOADED_LEDGERS = [41, 42]
LIVE_UUID, STALE_UUID = java_uuid(42, 42), java_uuid(42, 99)


def seed_references(store: MetadataStore) -> None:
    """Live references of every sort, the orphan of each, and ledgers kept though unreferenced."""
    w = ClusterWriter(store)
    w.ensure_layout()
    for lid in (1, 2, 3, 4, 5):  # listed, a cursor ledger, a schema ledger: all in use
        meta = pulsar_custom_metadata(TOPIC, cursor="sub" if lid == 4 else None)
        w.bk_ledger(lid, schema_custom_metadata(TOPIC) if lid == 5 else meta, ctime_ms=OLD_MS)
    w.managed_ledger(TOPIC, [1, 2, 3])
    w.cursor(TOPIC, "sub", Position(3, -1), cursors_ledger_id=4)
    w.schema(TOPIC, [5])
    for lid in (10, 11):  # orphans: their topic's metadata is gone
        w.bk_ledger(lid, pulsar_custom_metadata(GONE), ctime_ms=OLD_MS)
    w.bk_ledger(12, pulsar_custom_metadata(GONE, cursor="old-sub"), ctime_ms=OLD_MS)  # an orphan cursor ledger
    w.bk_ledger(13, schema_custom_metadata(GONE), ctime_ms=OLD_MS)  # an orphan schema ledger
    w.bk_ledger(20, pulsar_custom_metadata(GONE))  # unreferenced but young: not yet
    w.bk_ledger(21, {"application": "someone-else"}, ctime_ms=OLD_MS)  # not Pulsar's
    w.bk_ledger(22, pulsar_custom_metadata(GONE), state="OPEN", ctime_ms=OLD_MS)  # still being written


def seed_references_dir(data_dir: Path) -> None:
    """:func:`seed_references` in a new embedded data dir (4 orphans: two data, a cursor, a schema)."""
    data_dir.mkdir()
    with open_store(f"sqlite:///{data_dir / 'metadata.db'}") as store:
        seed_references(store)


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
    info = ManagedCursorInfo(-1, Position(31, 0), properties=properties or {},
                             cursor_properties=cursor_properties or {}, last_active=OLD_MS)
    store.put(cursor_path(topic, name), encode_cursor(info), ANY)


def _seed_compacted_and_buckets(store: MetadataStore) -> None:
    w = ClusterWriter(store)
    for lid in (31, 32, 38):
        w.bk_ledger(lid, pulsar_custom_metadata(GONE if lid == 38 else EVENTS), ctime_ms=OLD_MS)
    w.bk_ledger(34, _bucket(EVENTS, "delayed"), ctime_ms=OLD_MS)
    w.bk_ledger(35, _compacted(EVENTS), ctime_ms=OLD_MS)
    w.bk_ledger(36, _compacted(GONE), ctime_ms=OLD_MS)  # its topic was deleted (#21745)
    w.bk_ledger(37, _bucket(EVENTS, "gone-sub"), ctime_ms=OLD_MS)  # its subscription is gone (#22802)
    w.managed_ledger(EVENTS, [31, 32])
    _cursor(store, EVENTS, "delayed", cursor_properties={"#pulsar.internal.delayed.bucket_31_32": "34"})
    _cursor(store, EVENTS, "__compaction", properties={"CompactedTopicLedger": 35})


def _seed_failed_offload(store: MetadataStore, base: Path) -> bytes:
    """Ledger 42 is listed, offloaded under ``LIVE_UUID``; a failed earlier attempt left its objects
    under ``STALE_UUID``, which no context names.  Returns the offloaded data."""
    w = ClusterWriter(store)
    for lid in OFFLOADED_LEDGERS:
        w.bk_ledger(lid, pulsar_custom_metadata(OFFLOADED), ctime_ms=OLD_MS)
    context = OffloadContext(uid_msb=42, uid_lsb=42, complete=True, driver_name="filesystem",
                             driver_metadata={"storageBasePath": str(base)})
    w.managed_ledger(OFFLOADED, [41, LedgerInfo(42, entries=10, size=1024, offload_context=context)])
    ml = managed_ledger_name(OFFLOADED)
    data = build_mapfile_data(pulsar_ledger_metadata(ml, entries=10, size=1024, ctime_ms=OLD_MS))
    for uid in (LIVE_UUID, STALE_UUID):
        mapfile = base / ml / f"42-{uid}"
        mapfile.mkdir(parents=True)
        (mapfile / "data").write_bytes(data)
        (mapfile / "index").write_bytes(b"SEQ\x06index")
        for path in (mapfile / "data", mapfile / "index", mapfile):
            os.utime(path, (OLD_MS / 1000, OLD_MS / 1000))
    return data


def _present(data_dir: Path, ids: list[int]) -> list[int]:
    with open_store(f"sqlite:///{data_dir / 'metadata.db'}") as store:
        return [lid for lid in ids if store.get(ledger_path("/ledgers", lid, "hierarchical")) is not None]


def _scan(data_dir: Path, *extra: str) -> dict:
    done = run_cli("scan-orphans", "--min-age", "1d", *extra, "--data-dir", str(data_dir), "--json", timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
def test_every_kind_of_orphan_is_reclaimed_and_nothing_live_is_counted_or_deleted(tmp_path: Path,
                                                                                 spark: SparkSession) -> None:
    data_dir = tmp_path / "d"
    seed_references_dir(data_dir)
    base = (data_dir / "offload").resolve()
    with open_store(f"sqlite:///{data_dir / 'metadata.db'}") as store:
        _seed_compacted_and_buckets(store)
        offloaded = _seed_failed_offload(store, base)
    orphans = sorted([*REFERENCES_ORPHANS, *KINDS_ORPHANS])
    kept = sorted([*REFERENCES_KEPT, *KINDS_LIVE, *OFFLOADED_LEDGERS])
    stale = base / managed_ledger_name(OFFLOADED) / f"42-{STALE_UUID}"
    live = base / managed_ledger_name(OFFLOADED) / f"42-{LIVE_UUID}"
    out = tmp_path / "out"

    dry = _scan(data_dir, "--output", str(out))
    assert (dry["orphanLedgers"], dry["orphanOffloadedObjects"], dry["missingLedgers"], dry["enqueued"]) == (
        7, 1, 0, None)
    assert dry["orphanLedgersByKind"] == {"data": 3, "cursor": 1, "schema": 1, "compacted": 1, "delayed-bucket": 1,
                                          "other": 0}
    assert {p.name for p in out.iterdir()} >= {"orphan_ledgers.parquet", "missing_ledgers.parquet", "report.html",
                                               "summary.json"}
    assert json.loads((out / "summary.json").read_text())["orphanLedgersByKind"] == dry["orphanLedgersByKind"]
    report = (out / "report.html").read_text()
    assert "Compacted-topic ledgers" in report and "Delayed-delivery buckets" in report
    assert _present(data_dir, orphans) == orphans and stale.is_dir()  # a dry run sends nothing

    sent = _scan(data_dir, "--enqueue")
    assert sent["enqueued"] == {"sent": 8, "skipped": {}, "byKind": {
        "data": 3, "cursor": 1, "schema": 1, "compacted": 1, "delayed-bucket": 1, "offloaded": 1}}

    drained = run_cli("run", "--exit-when-idle", "--max-wait", "60", "--admin-address", f"127.0.0.1:{free_port()}",
                      "--data-dir", str(data_dir), timeout=180)
    assert drained.returncode == 0, drained.stderr
    assert _present(data_dir, orphans) == []
    assert _present(data_dir, kept) == kept
    assert not stale.exists()
    assert (live / "data").read_bytes() == offloaded
    listed = run_cli("dlq", "list", "--data-dir", str(data_dir), "--json", timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []

    after = rescan(spark, data_dir)
    assert (after["orphanLedgers"], after["orphanOffloadedObjects"]) == (0, 0)


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
            w.bk_ledger(lid, pulsar_custom_metadata(TOPIC), ctime_ms=OLD_MS)
    refused = run_cli("scan-orphans", "--enqueue", "--data-dir", str(data_dir), timeout=300)
    # refused before Spark starts: one line, no traceback, no Spark
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("error: found no references to any ledger") and "nothing was sent" in last
    assert "the scan did not start" in last and "Spark" not in refused.stderr.replace(last, "")
    assert _present(data_dir, [1, 2, 3]) == [1, 2, 3]
