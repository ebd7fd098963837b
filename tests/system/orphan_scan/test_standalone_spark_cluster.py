"""``scan-orphans --spark-master spark://…`` on a real standalone cluster (a
master and one worker from the pyspark wheel, see :mod:`tests.support.spark_cluster`) concludes what
``local[2]`` concludes, table for table.

One scan on the cluster serves every check that needs a real process (Spark scans are the suite's
slowest tests), run with the arguments the Helm chart gives its CronJob:

* its report lands in ``--reports-dir`` under the scan's time, ``latest`` points at it, and the
  oldest report past ``--keep-reports`` is gone;
* the missing ledgers are named in the output, 20 and then "and N more", and the
  missing-ledgers row is in the table;
* its stderr, not a terminal, carries progress lines per step and never the JVM's incubator
  warning.

The ``local[2]`` side is the suite's shared in-process session (the ``spark`` fixture), run on
the same seeded store, so the comparison costs no second CLI scan.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from deletion_service.cli import settings
from deletion_service.cli.commands.scan_orphans import MISSING_LOGGED, _sources
from deletion_service.cli.options import CommonOptions
from deletion_service.cluster_writer import ClusterWriter
from deletion_service.orphans.scan import run_scan
from metastore import open_store
from tests.deploy.test_helm_scan_reports_and_spark import REPORTS_DIR, scan_args
from tests.support.cli_runner import CliResult
from tests.support.spark_cluster import SparkCluster
from tests.system.orphan_scan.test_scan_enqueue_drain import seed_references_dir

LOST_TOPIC = "persistent://t/ns/lost"
MISSING = list(range(500, 500 + MISSING_LOGGED + 3))  # listed by a topic, absent from BookKeeper
OLD_REPORTS = ("scan-20200101T000000Z", "scan-20200102T000000Z")


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    cluster = SparkCluster(tmp_path_factory.mktemp("spark-cluster")).start()
    yield cluster
    cluster.stop()


def _world(data_dir: Path) -> None:
    """The end-to-end world (4 orphans of three kinds, kept ledgers of every other sort) plus a
    topic whose ledgers are all gone from BookKeeper."""
    seed_references_dir(data_dir)
    with open_store(f"sqlite:///{data_dir / 'metadata.db'}") as store:
        ClusterWriter(store).managed_ledger(LOST_TOPIC, MISSING)


def _rows(df: DataFrame) -> list[tuple]:
    return sorted((tuple(row) for row in df.collect()), key=repr)


@pytest.mark.slow
@pytest.mark.timeout(600)  # two JVMs to start and a scan through them: 100-120 s measured on 2 busy cores
def test_a_scan_on_a_standalone_cluster_equals_local(spark_cluster: SparkCluster, spark: SparkSession,
                                                      tmp_path: Path) -> None:
    data_dir, reports = tmp_path / "d", tmp_path / "reports"
    _world(data_dir)
    for old in OLD_REPORTS:
        (reports / old).mkdir(parents=True)
    args = scan_args({"scanOrphans": {"sparkMaster": spark_cluster.url, "reports": {"keep": 2},
                                      "sparkConf": {"spark.executor.memory": "512m"}}})
    # as in the pod, on loopback: its own reports dir, the "pod's IP" for $(POD_IP), bound to it alone
    args = [str(reports) if a == REPORTS_DIR else a.replace("$(POD_IP)", "127.0.0.1").replace("0.0.0.0", "127.0.0.1")
            for a in args]
    scan = subprocess.Popen([sys.executable, "-m", "deletion_service.cli.main", "scan-orphans", *args, "--data-dir",
                             str(data_dir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:  # local[2] meanwhile: the cluster's scan waits on its worker much of the time
        opts = CommonOptions(data_dir=data_dir)
        local = run_scan(spark, _sources(opts, settings.load(opts).config), 86_400)
        local_rows = {name: _rows(df) for name, df in local.results.items()}
        stdout, stderr = scan.communicate(timeout=480)
    finally:
        if scan.poll() is None:
            scan.kill()
            scan.wait()
    done = CliResult(scan.returncode, stdout, stderr)
    assert done.returncode == 0, done.stderr

    (written,) = [p for p in reports.iterdir() if p.name.startswith("scan-") and p.name not in OLD_REPORTS]
    assert sorted(p.name for p in reports.iterdir()) == sorted(["latest", OLD_REPORTS[1], written.name])
    assert (reports / "latest").resolve() == written.resolve()
    assert str(written / "report.html") in " ".join(done.stdout.split())

    on_cluster = json.loads((written / "summary.json").read_text())
    assert {**on_cluster, "scannedAt": 0} == {**local.data.summary.to_json(), "scannedAt": 0}
    assert (on_cluster["orphanLedgers"], on_cluster["missingLedgers"]) == (4, len(MISSING))
    for name, rows in local_rows.items():
        assert _rows(spark.read.parquet(str(written / f"{name}.parquet"))) == rows, name

    out = done.stdout.splitlines()
    named = [line for line in out if line.startswith("missing ledger ")]
    assert named == [f"missing ledger {lid}: referenced as ledger by {LOST_TOPIC}" for lid in MISSING[:MISSING_LOGGED]]
    assert "… and 3 more missing ledgers (all in missing_ledgers.parquet)" in out
    assert any("missing ledgers (referenced, absent)" in line and str(len(MISSING)) in line for line in out)

    err = done.stderr.splitlines()
    assert not any("incubator" in line for line in err), done.stderr
    progress = [line for line in err if line.startswith("scan-orphans [")]
    for step in ("inventory: BookKeeper's ledgers", "reconciling", "writing results"):
        assert any(step in line for line in progress), (step, done.stderr)
    assert all("\r" not in line for line in err)  # lines for a log, not a redrawn bar
