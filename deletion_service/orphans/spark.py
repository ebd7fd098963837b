"""A SparkSession the way PySpark's users run it: ``local[*]`` by default, any master by URL, quiet.

Executors run our inventory tasks in Python, so they must use this interpreter
(``PYSPARK_PYTHON``).  Spark's own INFO chatter would bury the progress and the
summary an operator is looking at, so the log level is WARN unless ``--debug``.

Quiet also on its stderr (:mod:`.jvm_stderr`: the JVM's start-up warning dropped) and when
interrupted (:mod:`.interrupts`: one line, no py4j tracebacks, the JVM gone).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from deletion_service.orphans.interrupts import QuietInterrupts
from deletion_service.orphans.jvm_stderr import JvmStderr
from deletion_service.orphans.scan_options import DEFAULT_MASTER

#: Warnings and errors only (Spark's default profile is chatty); ``--debug`` keeps Spark's own.
LOG4J2 = Path(__file__).with_name("log4j2.properties")


def spark_conf(master: str | None, app_name: str, debug: bool, conf: dict[str, str] | None) -> SparkConf:
    """Everything the JVM needs at launch (``spark.driver.memory`` only works from here), with the
    operator's ``conf`` last so it wins.  ``master`` None: the master ``spark-submit --master`` chose,
    else ``local[*]``.  Setting ``local[*]`` unconditionally would quietly run a submitted job on the
    driver alone."""
    if master is None:
        master = SparkConf().get("spark.master", DEFAULT_MASTER) or DEFAULT_MASTER
    settings = {"spark.master": master, "spark.app.name": app_name, "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false", "spark.sql.session.timeZone": "UTC",
                "spark.sql.shuffle.partitions": "16"}
    if master.startswith("local"):
        settings |= {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
    if not debug:
        settings["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile={LOG4J2.as_uri()}"
    return SparkConf().setAll([*settings.items(), *(conf or {}).items()])


def session(master: str | None = None, app_name: str = "ledger-deletion scan-orphans",
            debug: bool = False, conf: dict[str, str] | None = None) -> SparkSession:
    """Get or create the session.  On a local master Spark binds to loopback only."""
    settings = spark_conf(master, app_name, debug, conf)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if (settings.get("spark.master") or "").startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    interrupts = QuietInterrupts()
    if not debug:  # before the JVM starts: a Ctrl-C may come at any moment
        interrupts.install()
    if SparkContext._gateway is None:  # pyright: ignore[reportPrivateUsage] - no JVM yet: launch it, stderr piped
        with interrupts.held() as launched:
            gateway = launch_gateway(settings, popen_kwargs={"stderr": subprocess.PIPE})
            proc: subprocess.Popen | None = getattr(gateway, "proc", None)  # None under spark-submit
            if proc is not None:
                launched.append(proc)
        if proc is not None and proc.stderr is not None:
            interrupts.watch(JvmStderr(proc.stderr).start())
        SparkContext(conf=settings, gateway=gateway)
    spark = SparkSession.builder.config(conf=settings).getOrCreate()
    spark.sparkContext.setLogLevel("INFO" if debug else "WARN")
    if not debug:  # again: SparkContext put its own handler in
        interrupts.install()
    return spark
