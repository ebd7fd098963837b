"""What every inventory job shares: how a task opens its own client, how a table is kept, the errors."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark import RDD, StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from deletion_service.errors import UserError
from metastore import open_store
from metastore.interface import MetadataStore, MetadataStoreError, MetadataStoreUnavailable, Node

_log = logging.getLogger(__name__)

#: Nodes per ``get_many`` call (the store splits it into multi-reads sized to its replies).
READ_CHUNK = 1000
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


def read_nodes(store: MetadataStore, paths: Sequence[str]) -> tuple[dict[str, Node | None], dict[str, str]]:
    """Pipelined reads; when the batch fails for a reason other than the store being down,
    node by node, so a node the store refuses (no access, say) costs that node alone.

    Returns the nodes read and, per path that could not be read, why."""
    try:
        return store.get_many(paths), {}
    except MetadataStoreUnavailable:
        raise  # the task fails; Spark retries it
    except MetadataStoreError:
        _log.warning("a batched metadata read failed; reading %d node(s) one by one", len(paths))
    nodes: dict[str, Node | None] = {}
    failed: dict[str, str] = {}
    for path in paths:
        try:
            nodes[path] = store.get(path)
        except MetadataStoreUnavailable:
            raise
        except MetadataStoreError as e:
            failed[path] = f"{type(e).__name__}: {e}"
    return nodes, failed
