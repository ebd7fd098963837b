"""The columns of every table of the orphan scan, in one place.

The inventories are what the scan read (one row per thing found); the results are
what reconciliation concluded.  Names are camelCase like the contract's
``ledgerId``; Parquet files under ``--snapshot`` and ``--output`` use exactly these.
"""

from __future__ import annotations

from pyspark.sql.types import (
    BooleanType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)


def _schema(*fields: tuple[str, object, bool]) -> StructType:
    return StructType([StructField(name, kind, nullable) for name, kind, nullable in fields])  # type: ignore[arg-type]


#: One row per ledger znode under BookKeeper's ledgers root.
BK_LEDGERS = _schema(
    ("ledgerId", LongType(), False),
    ("state", StringType(), True),  # OPEN | IN_RECOVERY | CLOSED; null when unreadable
    ("ctimeMs", LongType(), True),  # the metadata's ctime, else the znode's
    ("length", LongType(), True),  # bytes
    ("application", StringType(), True),  # customMetadata "application" ("pulsar" for Pulsar's ledgers)
    ("component", StringType(), True),  # managed-ledger | schema | compacted-ledger | …
    ("managedLedger", StringType(), True),  # "pulsar/managed-ledger": tenant/ns/persistent/topic
    ("cursor", StringType(), True),  # "pulsar/cursor"
    ("schemaId", StringType(), True),  # "pulsar/schemaId"
    ("compactedTopic", StringType(), True),  # "pulsar/compactedTopic"
    ("customMetadata", MapType(StringType(), StringType()), True),  # every key, values as UTF-8 text
    ("error", StringType(), True),  # why the node could not be read or decoded: never a candidate
    ("kind", StringType(), True),  # reference_model.ledger_kind (LedgerKind); null when unreadable
)

#: What references a ledger, one row per reference (a ledger may have several).
REFERENCES = _schema(
    ("ledgerId", LongType(), False),
    ("kind", StringType(), False),  # reference_model.ReferenceKind (… | compacted | delayed-bucket)
    ("topic", StringType(), False),  # persistent://tenant/ns/topic
    ("detail", StringType(), True),  # the cursor's name (cursor, delayed-bucket), the schema id
    ("offloaded", BooleanType(), False),  # kind=ledger with a complete offload context
    ("bookkeeperDeleted", BooleanType(), False),  # … whose BookKeeper copy is already gone
)

#: Every offload context's uuid (per-ledger and streaming segments): which objects are referenced.
OFFLOAD_REFERENCES = _schema(
    ("uuid", StringType(), False),
    ("ledgerId", LongType(), False),
    ("topic", StringType(), False),
    ("location", StringType(), True),  # driver://bucket (or filesystem base dir) from driver metadata
)

#: Every topic (managed-ledger node) that exists, and whether the metadata store hides some of its
#: references: ``TopicMetadata.hidden`` (its ``__compaction`` cursor keeps its state in a cursor
#: ledger, so every compacted ledger of the topic counts as referenced).
TOPICS = _schema(
    ("topic", StringType(), False),
    ("tenant", StringType(), False),
    ("namespace", StringType(), False),  # tenant/ns
    ("hidden", StringType(), True),  # why some references cannot be seen; null: all can
)

#: One row per object in tiered storage (S3 bucket listing, filesystem directory).
OFFLOADED_OBJECTS = _schema(
    ("location", StringType(), False),  # driver://bucket or filesystem base dir
    ("name", StringType(), False),  # the object key
    ("uuid", StringType(), True),  # parsed from the name; null: not an offload object name
    ("ledgerId", LongType(), True),  # per-ledger objects; null for streaming segments
    ("objectKind", StringType(), False),  # data | index | segment | segment-index | other
    ("size", LongType(), False),
    ("lastModifiedMs", LongType(), False),
)

#: Results.  ``orphan_ledgers.parquet`` and ``missing_ledgers.parquet`` carry ``ledgerId`` (the contract).
ORPHAN_LEDGERS = _schema(
    ("ledgerId", LongType(), False),
    ("topic", StringType(), True),  # from the ledger's own metadata; null when it names none
    ("tenant", StringType(), True),
    ("namespace", StringType(), True),
    ("component", StringType(), True),
    ("cursor", StringType(), True),
    ("schemaId", StringType(), True),
    ("ctimeMs", LongType(), False),
    ("length", LongType(), False),
    ("kind", StringType(), False),  # reference_model.LedgerKind: data | cursor | schema | compacted | …
)

MISSING_LEDGERS = _schema(
    ("ledgerId", LongType(), False),
    ("kind", StringType(), False),  # what references it (REFERENCES.kind)
    ("topic", StringType(), False),
    ("detail", StringType(), True),
)

#: The orphan objects themselves, as listed, with the topic they belong to when something proves it
#: (the filesystem layout's managed-ledger directory, the managed ledger that lists the object's ledger,
#: or that ledger's own BookKeeper metadata): what an OFFLOAD_LEDGER request for them needs.
ORPHAN_OBJECTS = _schema(*((f.name, f.dataType, f.nullable) for f in OFFLOADED_OBJECTS.fields),
                         ("topic", StringType(), True))

INVENTORIES = {"bk_ledgers": BK_LEDGERS, "references": REFERENCES, "offload_references": OFFLOAD_REFERENCES,
               "topics": TOPICS, "offloaded_objects": OFFLOADED_OBJECTS}
RESULTS = {"orphan_ledgers": ORPHAN_LEDGERS, "missing_ledgers": MISSING_LEDGERS, "orphan_objects": ORPHAN_OBJECTS}
