"""What every inventory job shares: how a task opens its own client, how a table is kept, the errors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark import RDD, StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from deletion_service.errors import UserError

# the scan's other inventories read nodes through the one reader too (re-exported)
from deletion_service.protocol.metadata_reading import READ_CHUNK as READ_CHUNK
from deletion_service.protocol.metadata_reading import read_nodes as read_nodes
from metastore import open_store
from metastore.interface import MetadataStore

#: Chunks requested ahead of the one being decoded.
READ_AHEAD = 2
#: Threads listing cursors (one ``children`` call per topic) inside one namespace task.
LIST_THREADS = 8


class InventoryError(UserError):
    """An inventory could not be taken as a whole; the message names the node or location."""


@dataclass(frozen=True)
class StoreSpec:
    """How a task opens its own metadata-store client: picklable, unlike a client."""

    url: str
    digest_file: Path | None = None

    def open(self) -> MetadataStore:
        return open_store(self.url, digest_file=self.digest_file)


def table(spark: SparkSession, rdd: RDD, schema: StructType) -> DataFrame:
    """Rows our own code built with the schema's types: Spark's per-row type check is skipped
    (it costs more than decoding the row did)."""
    return kept(spark.createDataFrame(rdd, schema, verifySchema=False))


def kept(df: DataFrame) -> DataFrame:
    """Read once, now: later steps see one moment of the cluster and never re-read it."""
    df = df.persist(StorageLevel.MEMORY_AND_DISK)
    df.count()
    return df
