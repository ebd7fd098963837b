"""A SparkSession the way PySpark's users run it: ``local[*]`` by default, any master by URL, quiet.

Executors run our inventory tasks in Python, so they must use this interpreter
(``PYSPARK_PYTHON``).  Spark's own INFO chatter would bury the progress and the
summary an operator is looking at, so the log level is WARN unless ``--debug``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark import SparkConf
from pyspark.sql import SparkSession

from deletion_service.orphans.scan_options import DEFAULT_MASTER

#: Warnings and errors only (Spark's default profile is chatty); ``--debug`` keeps Spark's own.
LOG4J2 = Path(__file__).with_name("log4j2.properties")


def session(master: str | None = None, app_name: str = "ledger-deletion scan-orphans",
            debug: bool = False, conf: dict[str, str] | None = None) -> SparkSession:
    """Get or create the session.  On a local master Spark binds to loopback only.

    ``master`` None: the master ``spark-submit --master`` chose, else ``local[*]``.  Setting
    ``local[*]`` unconditionally would quietly run a submitted job on the driver alone."""
    if master is None:
        master = SparkConf().get("spark.master", DEFAULT_MASTER)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", "16"))
    if master.startswith("local"):
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    if not debug:
        builder = builder.config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={LOG4J2.as_uri()}")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("INFO" if debug else "WARN")
    return spark
