"""The whole scan: inventories (from the stores, or a snapshot) → reconciliation → outputs.

Kept free of CLI concerns so a notebook or a ``spark-submit`` job can call
:func:`run_scan` with its own SparkSession.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import SparkSession

from deletion_service.config import DeletionConfig
from deletion_service.errors import UsageError
from deletion_service.orphans import inventory, report, snapshot
from deletion_service.orphans.reconcile import reconcile, summarize
from deletion_service.orphans.summary import ReportData
from deletion_service.orphans.tables import Inventories, Results
from offloaders.registry import OffloaderSettings


@dataclass(frozen=True)
class ScanSources:
    """Where the inventories come from when no snapshot is read."""

    store: inventory.StoreSpec  # Pulsar's metadata (managed ledgers, cursors, schemas)
    bk_store: inventory.StoreSpec  # BookKeeper's ledger metadata
    config: DeletionConfig
    offload: OffloaderSettings  # the allow-list and the filesystem offloader's root


@dataclass(frozen=True)
class ScanOutcome:
    inventories: Inventories
    results: Results
    data: ReportData
    from_snapshot: bool
    written: list[Path]
    refused_locations: dict[str, str] = field(default_factory=dict)  # storage not listed, and why


Step = Callable[[str], None]


def take_inventories(spark: SparkSession, sources: ScanSources, step: Step) -> tuple[Inventories, dict[str, str]]:
    """The three inventory jobs (each table is read once and kept by :mod:`.inventory`), and the
    storage locations that could not be listed, with why: their objects are never candidates."""
    settings = sources.offload
    scope = inventory.OffloadScope.of(sources.config, settings)
    step("inventory: BookKeeper's ledgers")
    bk = inventory.bk_ledgers(spark, sources.bk_store, sources.config.bookkeeper_ledgers_root_path)
    step("inventory: Pulsar's references (managed ledgers, cursors, schemas)")
    refs, offload_refs, topics = inventory.pulsar_references(spark, sources.store, scope)
    step("inventory: tiered-storage objects")
    plan = inventory.object_locations(scope, offload_refs)
    objects = inventory.offloaded_objects(spark, plan.listed, settings)
    return Inventories(bk, refs, offload_refs, topics, objects), plan.refused


def run_scan(spark: SparkSession, sources: ScanSources | None, min_age_s: int, output: Path | None = None,
             snapshot_dir: Path | None = None, step: Step = lambda _: None,
             clock: Callable[[], float] = time.time) -> ScanOutcome:
    """Scan and reconcile.  ``snapshot_dir`` holding a snapshot: read it instead of the stores
    (``sources`` may then be None); an empty or new one: scan, then save the inventories there."""
    from_snapshot = snapshot_dir is not None and has_snapshot(snapshot_dir)
    refused: dict[str, str] = {}
    if from_snapshot:
        step(f"reading the snapshot in {snapshot_dir}")
        inventories = snapshot.read(spark, snapshot_dir)  # type: ignore[arg-type]
    else:
        if sources is None:
            raise UsageError(f"no snapshot in {snapshot_dir} and no metadata store to scan")
        inventories, refused = take_inventories(spark, sources, step)
        if snapshot_dir is not None:
            step(f"saving the inventories to {snapshot_dir}")
            snapshot.write(inventories, snapshot_dir)
    now_ms = int(clock() * 1000)
    step("reconciling")
    results = reconcile(inventories, min_age_s, now_ms)
    results = Results(*(df.persist(StorageLevel.MEMORY_AND_DISK) for _, df in results.items()))
    step("summarising: counts, namespaces, ages, the largest orphans")
    data = summarize(results, inventories, min_age_s, now_ms)
    written = write_outputs(results, data, output, step) if output is not None else []
    return ScanOutcome(inventories, results, data, from_snapshot, written, refused)


def has_snapshot(directory: Path) -> bool:
    """A directory a previous ``--snapshot`` scan wrote (reading then checks every table)."""
    return snapshot.path_of(directory, "bk_ledgers").exists()


def write_outputs(results: Results, data: ReportData, output: Path, step: Step) -> list[Path]:
    """``<table>.parquet`` for each result, ``summary.json`` and ``report.html``."""
    step(f"writing results to {output}")
    output.mkdir(parents=True, exist_ok=True)
    written = []
    for name, df in results.items():
        path = output / f"{name}.parquet"
        df.write.mode("overwrite").parquet(str(path))
        written.append(path)
    summary = output / "summary.json"
    summary.write_text(json.dumps(data.summary.to_json(), indent=2) + "\n")
    step(f"drawing {output / 'report.html'}")
    written += [summary, report.write(data, output / "report.html")]
    return written
