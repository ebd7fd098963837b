"""Pulsar's references (REFERENCES, OFFLOAD_REFERENCES, TOPICS): one pass, one Spark task per namespace."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from deletion_service.orphans.inventory.common import LIST_THREADS, InventoryError, StoreSpec, table
from deletion_service.orphans.inventory.locations import OffloadScope
from deletion_service.orphans.schemas import (
    OFFLOAD_REFERENCES,
    REFERENCES,
    TOPICS,
)
from deletion_service.protocol.metadata_reading import (
    UnreadableMetadata,
    namespaces,
    schemas_of_namespace,
    topics_of_namespace,
)
from deletion_service.protocol.references import Reference, TopicMetadata, UnreadableReference
from metastore.interface import MetadataStore

#: Tags of the rows one namespace task yields (one pass over the metadata feeds three tables).
_REF, _OFFLOAD, _TOPIC, _ERROR = range(4)


def topic_rows(meta: TopicMetadata, scope: OffloadScope) -> Iterator[tuple[int, tuple]]:
    """Tagged REFERENCES, OFFLOAD_REFERENCES and TOPICS rows of one topic's metadata, every one
    read off the reference model (:mod:`deletion_service.protocol.references`), the same model the
    delete phase asks "still in use?": the scan never spells out what references a ledger itself.

    A reference the model cannot read (a bucket property that names no ledger) fails the
    inventory like an undecodable node: every ledger it might name would otherwise look orphaned."""
    try:
        refs = list(meta.references())
    except UnreadableReference as e:
        raise UnreadableMetadata(str(e)) from e
    yield from ((_REF, reference_row(ref)) for ref in refs)
    for off in meta.offload_references():
        where = scope.location_of(off.driver_name, dict(off.driver_metadata))
        yield _OFFLOAD, (off.uuid, off.ledger_id, off.topic, where and where.location)


def reference_row(ref: Reference) -> tuple:
    """One REFERENCES row."""
    return (ref.ledger_id, ref.kind.value, ref.topic, ref.detail, ref.offloaded, ref.bookkeeper_deleted)


def _topics(store: MetadataStore, pool: ThreadPoolExecutor, tenant: str, ns: str,
            scope: OffloadScope) -> Iterator[tuple[int, tuple]]:
    for meta in topics_of_namespace(store, pool, tenant, ns):
        yield _TOPIC, (meta.topic, tenant, f"{tenant}/{ns}", meta.hidden)
        yield from topic_rows(meta, scope)


def _schemas(store: MetadataStore, tenant: str, ns: str, scope: OffloadScope) -> Iterator[tuple[int, tuple]]:
    for meta in schemas_of_namespace(store, tenant, ns):
        yield from topic_rows(meta, scope)


def _read_namespaces(store_spec: StoreSpec, scope: OffloadScope,
                     assigned: Iterable[tuple[str, str]]) -> Iterator[tuple[int, tuple]]:
    """One task: its own client; every topic, cursor and schema of its namespaces, tagged.
    A node that hides references ends the task with one ``_ERROR`` row naming it."""
    with store_spec.open() as store, ThreadPoolExecutor(LIST_THREADS, thread_name_prefix="cursors") as pool:
        for tenant, ns in assigned:
            try:
                yield from _topics(store, pool, tenant, ns, scope)
                yield from _schemas(store, tenant, ns, scope)
            except UnreadableMetadata as e:
                yield _ERROR, (str(e),)
                return


def pulsar_references(spark: SparkSession, store: StoreSpec,
                      scope: OffloadScope | None = None) -> tuple[DataFrame, DataFrame, DataFrame]:
    """(REFERENCES, OFFLOAD_REFERENCES, TOPICS): one pass over Pulsar's metadata, one task per namespace.

    ``scope`` names where offloaded objects went (the ``location`` column); without it only
    recorded S3 driver metadata can be named.  Raises :class:`InventoryError` when a
    managed-ledger, cursor or schema node cannot be read or decoded."""
    scope = scope or OffloadScope()
    with store.open() as client:
        found = namespaces(client)
    tagged = spark.sparkContext.parallelize(found, max(1, len(found))).mapPartitions(
        partial(_read_namespaces, store, scope)).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        tagged.count()
        errors = [row[0] for row in tagged.filter(partial(_tagged, _ERROR)).map(_row).take(3)]
        if errors:
            raise InventoryError("Pulsar metadata that hides references (no orphan list is safe without "
                                 "it): " + "; ".join(errors))
        tables = tuple(table(spark, tagged.filter(partial(_tagged, tag)).map(_row), schema)
                       for tag, schema in ((_REF, REFERENCES), (_OFFLOAD, OFFLOAD_REFERENCES), (_TOPIC, TOPICS)))
    finally:
        tagged.unpersist()
    return tables  # type: ignore[return-value]


def _tagged(tag: int, item: tuple[int, tuple]) -> bool:
    return item[0] == tag


def _row(item: tuple[int, tuple]) -> tuple:
    return item[1]
