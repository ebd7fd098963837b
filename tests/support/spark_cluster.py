"""Spark for tests: a real standalone cluster, one master and one worker from the pyspark wheel;
and :func:`rescan`, the scan ``scan-orphans`` runs, in this process on a session already started.

Started as an operator starts one (``bin/spark-class org.apache.spark.deploy.master.Master``
and ``…deploy.worker.Worker spark://…``), on free loopback ports, each a process of its own
stopped by its PID (see :mod:`tests.support.harness`).  Ready means what a driver needs: the master's
status page says ALIVE, then it lists the worker as ALIVE (about 7 s and 6 s more on a quiet
machine; waited for, never slept).  The worker's executors run this interpreter
(``PYSPARK_PYTHON``), so they import this checkout as the driver does.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

from deletion_service.cli import settings
from deletion_service.cli.commands.scan_orphans import _sources
from deletion_service.cli.options import CommonOptions
from deletion_service.orphans.scan import run_scan
from tests.support.harness import ServerProcess, free_port, wait_until

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
#: What a busy 2-core machine needs to start two JVMs, with room.
START_TIMEOUT_S = 120


def _env(workdir: Path) -> dict[str, str]:
    return {"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable, "SPARK_LOG_DIR": str(workdir),
            "SPARK_WORKER_DIR": str(workdir / "work"), "SPARK_NO_DAEMONIZE": "1",
            # the master and the worker live for one module: C1 and one GC thread (as tests/support/spark-conf)
            "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:CICompilerCount=1"}


class SparkMaster(ServerProcess):
    def __init__(self, workdir: Path) -> None:
        super().__init__("spark-master", workdir)
        self.webui_port = 0

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def status(self) -> dict:
        """The master's own JSON status page (``/json/``): its state and its workers'."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui_port}/json/", timeout=2) as r:
            return json.loads(r.read())

    def _status_is(self, check: str) -> bool:
        try:
            status = self.status()
        except (OSError, ValueError):  # not answering yet, or (seen once, while it starts) an HTML page, not JSON
            return False
        if check == "master":
            return status.get("status") == "ALIVE"
        return any(w.get("state") == "ALIVE" for w in status.get("workers", []))

    def start(self) -> SparkMaster:
        self.port, self.webui_port = free_port(), free_port()
        self._spawn([str(SPARK_CLASS), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                     "--port", str(self.port), "--webui-port", str(self.webui_port)], env=_env(self.workdir))
        try:
            wait_until(lambda: self._status_is("master"), START_TIMEOUT_S, "Spark master", self.proc, self.log_path,
                       interval=0.5)
        except BaseException:
            self.stop()  # a master that never became ready is still a JVM of ours
            raise
        return self

    def wait_for_worker(self, worker: SparkWorker) -> None:
        wait_until(lambda: self._status_is("worker"), START_TIMEOUT_S, "Spark worker", worker.proc, worker.log_path,
                   interval=0.5)


class SparkWorker(ServerProcess):
    def __init__(self, workdir: Path) -> None:
        super().__init__("spark-worker", workdir)

    def start(self, master: SparkMaster) -> SparkWorker:
        self._spawn([str(SPARK_CLASS), "org.apache.spark.deploy.worker.Worker", master.url, "--host", "127.0.0.1",
                     "--cores", "1", "--memory", "1g", "--webui-port", str(free_port())], env=_env(self.workdir))
        master.wait_for_worker(self)
        return self


class SparkCluster:
    """A master and one worker; :meth:`stop` stops both by PID (worker first)."""

    def __init__(self, workdir: Path) -> None:
        self.master = SparkMaster(workdir / "master")
        self.worker = SparkWorker(workdir / "worker")

    @property
    def url(self) -> str:
        return self.master.url

    def start(self) -> SparkCluster:
        self.master.start()
        try:
            self.worker.start(self.master)
        except BaseException:
            self.master.stop()
            raise
        return self

    def stop(self) -> None:
        self.worker.stop()
        self.master.stop()


def rescan(spark: SparkSession, data_dir: Path, min_age_s: int = 86_400) -> dict:
    """The summary ``scan-orphans --min-age`` would print for ``data_dir`` (its JSON form), scanned
    in this process on ``spark`` with the stores and settings the CLI would read: a CLI scan costs a
    JVM of its own, where a test only needs the scan's answer."""
    opts = CommonOptions(data_dir=data_dir)
    return run_scan(spark, _sources(opts, settings.load(opts).config), min_age_s).data.summary.to_json()
