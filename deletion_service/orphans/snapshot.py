"""The inventories as Parquet (``--snapshot DIR``): take a scan's reading once, reconcile it anywhere.

Why: reading a large cluster's metadata is the slow, production-touching part of a
scan; reconciling is pure data.  A snapshot lets an operator repeat the
reconciliation offline (another ``--min-age``, a fixed bug) or ship the tables to
a bigger Spark cluster, without asking ZooKeeper or S3 again.

Each inventory is ``<DIR>/<name>.parquet`` (names and columns from
:data:`~deletion_service.orphans.schemas.INVENTORIES`).  Reading checks every
table's columns against the schema and refuses a snapshot with a table missing
or different, naming the file: a snapshot from another version would otherwise
reconcile silently wrong (a renamed column read as all nulls looks like "no
references").
"""

from __future__ import annotations

from pathlib import Path

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from deletion_service.errors import UserError
from deletion_service.orphans.schemas import INVENTORIES
from deletion_service.orphans.tables import Inventories

SUFFIX = ".parquet"


def path_of(directory: Path, name: str) -> Path:
    """Where inventory ``name`` lives in a snapshot directory."""
    return Path(directory) / f"{name}{SUFFIX}"


def write(inventories: Inventories, directory: Path) -> None:
    """Write every inventory as ``<name>.parquet`` under ``directory``, replacing an older snapshot's."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name, df in inventories.items():
        df.select(*INVENTORIES[name].fieldNames()).write.mode("overwrite").parquet(
            str(path_of(directory, name).absolute()))


def read(spark: SparkSession, directory: Path) -> Inventories:
    """Read a snapshot back; :class:`UserError` naming the file when a table is missing or its
    columns are not the schema's (names, types; nullability may differ, Parquet relaxes it)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise UserError(f"snapshot directory {directory} does not exist (write one with --snapshot on a scan "
                        "that reads the cluster)")
    return Inventories(**{name: _read_table(spark, path_of(directory, name), schema)
                          for name, schema in INVENTORIES.items()})


def _read_table(spark: SparkSession, path: Path, schema: StructType) -> DataFrame:
    if not path.exists():
        raise UserError(f"snapshot table {path} is missing: not a complete snapshot of this version's inventories")
    try:
        df = spark.read.parquet(str(path.absolute()))
    except AnalysisException as e:
        raise UserError(f"snapshot table {path} is not readable Parquet: {e.getMessage()}") from e
    problem = schema_difference(df.schema, schema)
    if problem:
        raise UserError(f"snapshot table {path} does not have the expected columns: {problem}")
    # the schema's column order; columns stay nullable (Spark reads every Parquet column so), which
    # no step relies on, and re-imposing it would route every row through Python
    return df.select(*schema.fieldNames())


def schema_difference(found: StructType, expected: StructType) -> str | None:
    """What differs between two schemas, by column name and type; ``None`` when nothing does."""
    have = {f.name: f.dataType for f in found.fields}
    want = {f.name: f.dataType for f in expected.fields}
    missing = [n for n in want if n not in have]
    extra = [n for n in have if n not in want]
    retyped = [f"{n} is {have[n].simpleString()}, expected {t.simpleString()}" for n, t in want.items()
               if n in have and have[n] != t]
    parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
        [f"unexpected {', '.join(extra)}"] if extra else []) + retyped
    return "; ".join(parts) or None
