"""Orphan reconciliation at cluster scale on ``local[2]``: 10M ledgers against 9.5M references.

    python -m bench.orphan_reconcile [--ledgers 10000000] [--partitions 8] [--keep DIR] [--repeat 1]

Generates the inventories as Parquet with Spark itself (``spark.range`` and column
expressions), then times the job an operator waits for: read the inventories,
:func:`~deletion_service.orphans.reconcile.reconcile`, write the three result tables as
Parquet.  ``summarize`` on the written results is timed separately.  Target: ≤ 60 s of job
time for 10M ledgers.  Figures, not assertions: tests never time anything.

The generated cluster: 20 tenants × 100 namespaces × 50,000 topics; 95% of the ledgers are
listed (references cover all but every 20th id), 1% OPEN or IN_RECOVERY, 1% of another
application, a ledger in 10,007 unreadable, 2% schema, 0.1% compacted (half of them of
deleted topics, 1% of topics hiding theirs) and 0.1% delayed-bucket ledgers, creation
times spread over 180 days; 1 reference in 5,000 names a ledger BookKeeper lacks (a fifth
of those offloaded with the BookKeeper copy deleted); 100k offload contexts and 200k
objects, a quarter of them orphans.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from deletion_service.orphans import schemas
from deletion_service.orphans.reconcile import reconcile, summarize
from deletion_service.orphans.spark import session
from deletion_service.orphans.tables import Inventories, Results

DAY_MS = 86400 * 1000
NOW_MS = 1_700_000_000_000
MIN_AGE_S = 86400
TOPICS = 50_000
OFFLOADS = 100_000

#: Tuned for two cores: few shuffle partitions (AQE coalesces further), hash joins instead of
#: sorting ten million rows, input splits small enough that both cores read.
SPARK_CONF = {
    "spark.driver.memory": "6g",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
    "spark.sql.join.preferSortMergeJoin": "false",
    "spark.sql.adaptive.maxShuffledHashJoinLocalMapThreshold": "256m",
    "spark.sql.files.maxPartitionBytes": "32m",
    "spark.sql.parquet.compression.codec": "lz4",
}


def _shaped(df: DataFrame, schema: StructType) -> DataFrame:
    """The schema's columns in its order and types (Parquet stores every column nullable anyway)."""
    return df.select(*(F.col(f.name).cast(f.dataType).alias(f.name) for f in schema.fields))


def _topic(x: Column) -> tuple[Column, Column, Column]:
    """(tenant, ns, local) of topic number ``x``."""
    return (F.concat(F.lit("tenant-"), (x % 20).cast("string")), F.concat(F.lit("ns-"), (x % 100).cast("string")),
            F.concat(F.lit("topic-"), x.cast("string")))


def _full_name(x: Column) -> Column:
    tenant, ns, local = _topic(x)
    return F.concat(F.lit("persistent://"), tenant, F.lit("/"), ns, F.lit("/"), local)


def bk_ledgers(spark: SparkSession, n: int, files: int) -> DataFrame:
    """``n`` ledgers with ids 0…n-1 (columns of ``BK_LEDGERS``)."""
    lid = F.col("id")
    tenant, ns, local = _topic(lid % TOPICS)
    component = (F.when(lid % 50 == 3, "schema").when(lid % 1000 == 4, "compacted-ledger")
                 .when(lid % 1000 == 6, "delayed-index-bucket").otherwise("managed-ledger"))
    application = F.when(lid % 97 == 0, "other").otherwise("pulsar")
    df = spark.range(n, numPartitions=files).select(
        lid.alias("ledgerId"),
        F.when(lid % 100 == 1, "OPEN").when(lid % 100 == 2, "IN_RECOVERY").otherwise("CLOSED").alias("state"),
        (F.lit(NOW_MS) - (lid * 7919) % (180 * DAY_MS // 1000) * 1000).alias("ctimeMs"),
        ((lid % 1000) * 1024 + 1).alias("length"),
        application.alias("application"),
        component.alias("component"),
        F.when(component.isin("managed-ledger", "delayed-index-bucket"),
               F.concat_ws("/", tenant, ns, F.lit("persistent"), local)).alias("managedLedger"),
        F.when(((component == "managed-ledger") & (lid % 10 == 5)) | (component == "delayed-index-bucket"),
               F.concat(F.lit("sub-"), (lid % 7).cast("string"))).alias("cursor"),
        F.when(component == "schema", F.concat_ws("/", tenant, ns, local)).alias("schemaId"),
        F.when(component == "compacted-ledger", _full_name(lid % (2 * TOPICS))).alias("compactedTopic"),
        F.create_map(F.lit("application"), application, F.lit("component"), component).alias("customMetadata"),
        F.when(lid % 10007 == 0, "cannot decode").alias("error"),
        # reference_model.ledger_kind, as the inventory computes it for every row it decodes
        F.when(lid % 10007 == 0, None).when(application != "pulsar", "other")
        .when(component == "schema", "schema").when(component == "compacted-ledger", "compacted")
        .when(component == "delayed-index-bucket", "delayed-bucket")
        .when(lid % 10 == 5, "cursor").otherwise("data").alias("kind"),
    )
    return _shaped(df, schemas.BK_LEDGERS)


def references(spark: SparkSession, n: int, count: int, files: int) -> DataFrame:
    """``count`` references: ids skip every 20th ledger; 1 in 5,000 points past the last ledger."""
    r = F.col("id")
    absent = r % 5000 == 7
    kind = F.when(r % 10 == 5, "cursor").when(r % 50 == 3, "schema").otherwise("ledger")
    return spark.range(count, numPartitions=files).select(
        F.when(absent, F.lit(n) + r).otherwise(r + F.floor(r / 19)).cast("long").alias("ledgerId"),
        kind.alias("kind"),
        _full_name(r % TOPICS).alias("topic"),
        F.when(kind == "cursor", F.lit("sub-1")).alias("detail"),
        ((kind == "ledger") & (r % 3 == 0)).alias("offloaded"),
        ((kind == "ledger") & (r % 3 == 0) & (r % 7 < 4)).alias("bookkeeperDeleted"),
    ).transform(lambda df: _shaped(df, schemas.REFERENCES))


def _uuid(x: Column) -> Column:
    return F.format_string("%08x-0000-4000-8000-%012x", x, x * 31)


def small_tables(spark: SparkSession) -> dict[str, DataFrame]:
    """Topics, offload contexts and objects (a quarter of the objects' uuids are in no context)."""
    x = F.col("id")
    tenant, ns, _ = _topic(x)
    topics = spark.range(TOPICS).select(_full_name(x).alias("topic"), tenant.alias("tenant"),
                                        F.concat_ws("/", tenant, ns).alias("namespace"),
                                        F.when(x % 100 == 0, "compaction cursor in a cursor ledger").alias("hidden"))
    offload_refs = spark.range(OFFLOADS).select(_uuid(x).alias("uuid"), (x * 20).alias("ledgerId"),
                                                _full_name(x % TOPICS).alias("topic"),
                                                F.lit("aws-s3://offload").alias("location"))
    o = F.col("id")
    context = F.floor(o / 2) + F.when(o % 4 == 3, F.lit(OFFLOADS)).otherwise(0)  # past the last context
    objects = spark.range(2 * OFFLOADS).select(
        F.lit("aws-s3://offload").alias("location"),
        F.concat(_uuid(context), F.lit("-ledger-"), (context * 20).cast("string"),
                 F.when(o % 2 == 1, F.lit("-index")).otherwise(F.lit(""))).alias("name"),
        _uuid(context).alias("uuid"), (context * 20).alias("ledgerId"),
        F.when(o % 2 == 1, "index").otherwise("data").alias("objectKind"),
        (o % 1000 * 4096).alias("size"), (F.lit(NOW_MS) - o * 60_000).alias("lastModifiedMs"))
    return {"topics": _shaped(topics, schemas.TOPICS),
            "offload_references": _shaped(offload_refs, schemas.OFFLOAD_REFERENCES),
            "offloaded_objects": _shaped(objects, schemas.OFFLOADED_OBJECTS)}


def generate(spark: SparkSession, n: int, data: Path, files: int) -> None:
    tables = {"bk_ledgers": bk_ledgers(spark, n, files), "references": references(spark, n, n * 95 // 100, files),
              **small_tables(spark)}
    for name, df in tables.items():
        df.write.mode("overwrite").parquet(str(data / name))


def read_inventories(spark: SparkSession, data: Path) -> Inventories:
    return Inventories(**{name: spark.read.schema(schema).parquet(str(data / name))
                          for name, schema in schemas.INVENTORIES.items()})


def run_job(spark: SparkSession, data: Path, out: Path) -> float:
    """Read → reconcile → write the results; seconds of wall time."""
    started = time.perf_counter()
    results = reconcile(read_inventories(spark, data), MIN_AGE_S, NOW_MS)
    for name, df in results.items():
        df.write.mode("overwrite").parquet(str(out / name))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ledgers", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=8, help="Parquet files per large input table")
    parser.add_argument("--keep", type=Path, help="generate into (and reuse) this directory")
    parser.add_argument("--repeat", type=int, default=1, help="run the job again in the same JVM (warm) and show each")
    args = parser.parse_args()
    spark = session("local[2]", app_name="bench orphan_reconcile", conf=SPARK_CONF)
    with tempfile.TemporaryDirectory() as tmp:
        data = args.keep or Path(tmp) / "inventories"
        started = time.perf_counter()
        if not (data / "bk_ledgers" / "_SUCCESS").exists():
            generate(spark, args.ledgers, data, args.partitions)
        generated_s = time.perf_counter() - started
        out = Path(tmp) / "results"
        runs = [run_job(spark, data, out) for _ in range(args.repeat)]
        job_s = runs[0]
        inv = read_inventories(spark, data)
        results = Results(**{name: spark.read.parquet(str(out / name)) for name in schemas.RESULTS})
        started = time.perf_counter()
        summary = summarize(results, inv, MIN_AGE_S, NOW_MS).summary
        summarize_s = time.perf_counter() - started
    spark.stop()
    rows = summary.scanned_ledgers + summary.references
    print(f"inventories generated as Parquet in {generated_s:.1f} s")
    print(f"{'ledgers':<34}{summary.scanned_ledgers:>14,}")
    print(f"{'references':<34}{summary.references:>14,}")
    print(f"{'objects':<34}{summary.scanned_objects:>14,}")
    print(f"{'orphan ledgers found':<34}{summary.orphan_ledgers:>14,}")
    print(f"{'missing ledgers found':<34}{summary.missing_ledgers:>14,}")
    print(f"{'orphan objects found':<34}{summary.orphan_offloaded_objects:>14,}")
    print(f"{'job: read, reconcile, write (s)':<34}{job_s:>14.1f}  (first run, cold JVM; target ≤ 60)")
    print(f"{'rows in / s':<34}{rows / job_s:>14,.0f}")
    for i, again_s in enumerate(runs[1:], start=2):
        print(f"{f'  run {i} in the same JVM (s)':<34}{again_s:>14.1f}  ({rows / again_s:,.0f} rows/s)")
    print(f"{'summarize on the written results (s)':<34}{summarize_s:>14.1f}")


if __name__ == "__main__":
    main()
