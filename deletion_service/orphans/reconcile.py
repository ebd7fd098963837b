"""Reconciliation: what storage holds against what Pulsar references, as Spark joins.

Every rule that decides "orphan" or "missing" lives here, and nothing here does I/O:
the inventories come in as DataFrames, the results go out as DataFrames (columns of
:mod:`.schemas`), and only small aggregates (:func:`summarize`) ever reach the driver.
The large sides (ten million ledgers, as many references) meet in shuffled anti-joins;
Spark (with adaptive execution) broadcasts whichever side turns out small.

The rules, and why each errs on the side of keeping data:

* an **orphan ledger** is a Pulsar ledger (``application=pulsar``), CLOSED, readable
  (an unreadable node proves nothing), created at least ``min_age_s`` ago (a ledger
  is created before its reference is written, so a young one may be in flight),
  that no reference of any kind names (the references are the reference model's, the
  delete phase's: data, cursor, schema, compacted, delayed-bucket), and that is not a
  compacted ledger of a topic whose references the metadata store hides
  (``TopicMetadata.hidden``: its ``__compaction`` cursor keeps its state in a cursor
  ledger, which may name a newer compacted ledger than its node).  So a compacted
  ledger whose topic is gone (upstream leak #21745), has no compaction cursor, or whose
  visible compaction cursor names another ledger is an orphan; and a bucket ledger no
  cursor property names (its subscription gone, or the bucket merged away: #22802) is one;
* an **orphan offloaded object** has an offload name (a uuid) that no offload
  context names, and was last modified at least ``min_age_s`` ago (an offload writes
  its objects before the managed ledger records the context).  The uuid alone
  decides: an object whose uuid any context anywhere names is kept;
* a **missing ledger** is referenced but has no node in BookKeeper — except a data
  ledger whose offload context says the BookKeeper copy was deleted on purpose.

An orphan's topic comes from its *own* metadata, keyed by its kind (schema →
``pulsar/schemaId``, compacted → ``pulsar/compactedTopic``, otherwise
``pulsar/managed-ledger``), decoded exactly as :mod:`metastore.formats.pulsar_paths`
does and null when the value is not a well-formed name: the delete phase checks a
request against the same key, so a topic guessed from another key would only be
dead-lettered.  An orphan object's topic is what proves whose it is: the managed-ledger
directory the filesystem layout put it under, else the managed ledger that lists its
ledger (a stale uuid of a failed earlier offload), else that ledger's own BookKeeper
metadata; the delete phase then verifies the object's index names that topic.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from deletion_service.orphans import schemas
from deletion_service.orphans.summary import (
    MISSING_SHOWN,
    AgeBucket,
    MissingLedger,
    NamespaceTotals,
    ReportData,
    ScanSummary,
)
from deletion_service.orphans.tables import Inventories, Results
from deletion_service.protocol.references import LedgerKind, ReferenceKind
from metastore.formats.custom_metadata import APPLICATION_PULSAR
from metastore.formats.pulsar_paths import DOMAIN

#: BookKeeper's state of a ledger that no writer will ever append to again.
STATE_CLOSED = "CLOSED"
#: REFERENCES.kind of a managed ledger's own ledger list (the only kind an offload can make absent).
KIND_LEDGER = ReferenceKind.LEDGER.value
#: Where the filesystem driver's objects are listed (``inventory.locations``' location strings).
_FILESYSTEM_LOCATION = "filesystem://"
#: Namespace (and tenant) of orphans whose metadata names no topic.
UNKNOWN = "(unknown)"
#: Upper edges of the age histogram's buckets (seconds); the first bucket starts at ``min_age_s``.
AGE_EDGES_S = (2 * 86400, 7 * 86400, 30 * 86400, 90 * 86400)
#: How many of the biggest orphan ledgers the report lists.
LARGEST_SHOWN = 20

_TOPIC_PREFIX = f"{DOMAIN}://"
# Pulsar's NamedEntity.checkName, whole string (Java's ``$`` would also match before a final newline).
_ENTITY = r"\A[-=:.\w]+\z"
# java.net.URLDecoder throws on these; pulsar_paths.url_decode refuses them.
_MALFORMED_ESCAPE = r"%(?![0-9A-Fa-f]{2})"
_DOT_SEGMENTS = (".", "..")
# Begins a join key that can equal no topic name (those begin with "persistent://").
_NOT_A_TOPIC = "\x00ledger:"


# --------------------------------------------------------------------------- reconcile


def reconcile(inv: Inventories, min_age_s: int, now_ms: int) -> Results:
    """Orphan ledgers, missing ledgers and orphan offloaded objects (lazy DataFrames: nothing runs yet)."""
    cutoff_ms = now_ms - min_age_s * 1000
    return Results(orphan_ledgers=orphan_ledgers(inv, cutoff_ms), missing_ledgers=missing_ledgers(inv),
                   orphan_objects=orphan_objects(inv, cutoff_ms))


def orphan_ledgers(inv: Inventories, cutoff_ms: int) -> DataFrame:
    """Candidates (Pulsar's, CLOSED, readable, created at or before ``cutoff_ms``) that nothing references.
    A length the metadata did not record counts as 0 bytes (nothing to promise as reclaimable).

    The compacted ledgers of topics that hide their compacted ledger are dropped after the one
    large anti-join, from the few unreferenced candidates left.  Every other ledger gets a join key
    no topic has (its id), so that join never hashes millions of null ``compactedTopic`` values
    into one task."""
    candidates = inv.bk_ledgers.where((F.col("application") == APPLICATION_PULSAR)
                                      & (F.col("state") == STATE_CLOSED) & F.col("error").isNull()
                                      & F.col("ctimeMs").isNotNull() & (F.col("ctimeMs") <= F.lit(cutoff_ms)))
    candidates = candidates.select("ledgerId", "ctimeMs", F.coalesce("length", F.lit(0)).alias("length"),
                                   "component", "managedLedger", "cursor", "schemaId", "compactedTopic",
                                   F.coalesce("kind", F.lit(LedgerKind.OTHER.value)).alias("kind"))
    unreferenced = candidates.join(inv.references.select("ledgerId"), "ledgerId", "left_anti")
    compacted_key = F.coalesce(F.when(F.col("kind") == LedgerKind.COMPACTED.value, F.col("compactedTopic")),
                               F.concat(F.lit(_NOT_A_TOPIC), F.col("ledgerId").cast("string")))
    hiding = inv.topics.where(F.col("hidden").isNotNull()).select(F.col("topic").alias("_compactedKey"))
    orphans = (unreferenced.withColumn("_compactedKey", compacted_key)
               .join(hiding, "_compactedKey", "left_anti").drop("_compactedKey"))
    named = _with_owner_topic(orphans)
    return named.select(*(F.col(f.name) for f in schemas.ORPHAN_LEDGERS.fields))


def missing_ledgers(inv: Inventories) -> DataFrame:
    """References whose ledger has no node in BookKeeper (a data-loss alarm), one row per distinct reference.

    A data ledger whose offload context is complete and records ``bookkeeperDeleted`` is not
    missing: its data lives in tiered storage, and Pulsar deleted the BookKeeper copy itself."""
    refs = inv.references
    offloaded_away = F.coalesce((refs["kind"] == KIND_LEDGER) & refs["offloaded"] & refs["bookkeeperDeleted"],
                                F.lit(False))  # a null flag must not hide a missing ledger
    expected = refs.where(~offloaded_away).select("ledgerId", "kind", "topic", "detail")
    present = inv.bk_ledgers.select("ledgerId")
    return expected.join(present, "ledgerId", "left_anti").distinct()


def orphan_objects(inv: Inventories, cutoff_ms: int) -> DataFrame:
    """Offload-named objects, last modified at or before ``cutoff_ms``, whose uuid no offload context
    names, each with the topic that proves whose it is (see the module's docstring; null: none does)."""
    objects = inv.offloaded_objects.where(F.col("uuid").isNotNull()
                                          & (F.col("lastModifiedMs") <= F.lit(cutoff_ms)))
    named = inv.offload_references.select("uuid")
    orphans = objects.join(named, "uuid", "left_anti")
    return _with_object_topic(orphans, inv).select(*(F.col(f.name) for f in schemas.ORPHAN_OBJECTS.fields))


def _with_object_topic(orphans: DataFrame, inv: Inventories) -> DataFrame:
    """Add ``topic``: the filesystem layout's managed-ledger directory (``<ml name>/<ledger>-<uuid>``),
    else the smallest topic whose ledger list names the object's ledger, else the managed ledger
    that ledger's own BookKeeper metadata names (a data ledger's).  Both lookups are first cut
    to the orphans' ledger ids (usually few)."""
    wanted = orphans.where(F.col("ledgerId").isNotNull()).select("ledgerId").distinct()
    listed = (inv.references.where(F.col("kind") == KIND_LEDGER).join(wanted, "ledgerId", "left_semi")
              .groupBy("ledgerId").agg(F.min("topic").alias("_listedBy")))
    in_bk = (inv.bk_ledgers.where((F.col("kind") == LedgerKind.DATA.value) & F.col("error").isNull())
             .join(wanted, "ledgerId", "left_semi").select("ledgerId", F.col("managedLedger").alias("_bkMl")))
    fs_parts = F.split(F.col("name"), "/")
    fs_ml = F.when(F.col("location").startswith(_FILESYSTEM_LOCATION) & (F.size(fs_parts) == 5),
                   F.concat_ws("/", *(F.element_at(fs_parts, i) for i in range(1, 5))))
    joined = (orphans.join(listed, "ledgerId", "left").join(in_bk, "ledgerId", "left")
              .withColumn("_fsMl", fs_ml).withColumn("_ml", F.coalesce("_fsMl", "_bkMl")))
    parts = F.split(F.col("_ml"), "/")
    named = _with_topic(joined, parts, (F.size("_parts") == 4) & (_part(3) == DOMAIN), F.lit(True))
    topic = F.when(F.col("_fsMl").isNotNull(), F.col("topic")).otherwise(F.coalesce("_listedBy", "topic"))
    return named.withColumn("topic", topic).drop("_listedBy", "_bkMl", "_fsMl", "_ml", "tenant", "namespace")


# --------------------------------------------------------------------------- topic names, as pulsar_paths reads them
#
# One step per select, each naming its result: a column used several times by the next step is
# then computed once (Spark keeps apart projections whose costly expressions are used twice),
# where one nested expression would repeat the decoding a dozen times per row.


def _part(index: int) -> Column:
    """``_parts``' element at 1-based ``index`` (negative: from the end), null if there is none
    (``[]`` would throw under ANSI mode)."""
    return F.try_element_at(F.col("_parts"), F.lit(index))


def _full_name_parts(name: Column) -> Column:
    """``persistent://tenant/ns/<local>`` split after the domain; null for any other domain or form."""
    return F.when(name.startswith(_TOPIC_PREFIX), F.split(F.substring(name, len(_TOPIC_PREFIX) + 1, 1 << 30), "/"))


def _owner_parts(kind: Column) -> tuple[Column, Column, Column]:
    """Step 1 for a ledger: ``(parts, well_formed, encoded)`` of the name its kind's key holds —
    managed ledger ``tenant/ns/persistent/<encoded local>``, schema id ``tenant/ns/<encoded base
    topic>``, compacted topic ``persistent://tenant/ns/<local>`` (a full name, not encoded)."""
    is_schema, is_compacted = kind == LedgerKind.SCHEMA.value, kind == LedgerKind.COMPACTED.value
    parts = (F.when(is_schema, F.split(F.col("schemaId"), "/"))
             .when(is_compacted, _full_name_parts(F.col("compactedTopic")))
             .otherwise(F.split(F.col("managedLedger"), "/")))
    well_formed = (F.when(is_schema | is_compacted, F.size("_parts") == 3)
                   .otherwise((F.size("_parts") == 4) & (_part(3) == DOMAIN)))
    return parts, well_formed, F.coalesce(~is_compacted, F.lit(True))


def _with_owner_topic(ledgers: DataFrame) -> DataFrame:
    """Add ``topic``, ``tenant`` and ``namespace`` from the metadata key the ledger's kind uses."""
    return _with_topic(ledgers, *_owner_parts(F.col("kind")))


def _with_topic(df: DataFrame, parts: Column, well_formed: Column, encoded: Column) -> DataFrame:
    """Add ``topic``, ``tenant`` and ``namespace`` from a name split at ``/`` (``parts``; its last part
    URL-encoded if ``encoded``), exactly as :mod:`~metastore.formats.pulsar_paths` reads it, null where
    it would raise: ``url_decode`` (malformed escapes, guarded since Spark's decoder throws on them;
    bytes that are not UTF-8, which Java's decoder turns into U+FFFD so re-encoding differs), a name
    not in Pulsar's canonical encoding (``topic_from_managed_ledger_name``), and names
    :class:`~metastore.formats.pulsar_paths.TopicName` refuses."""
    malformed = F.col("_raw").rlike(_MALFORMED_ESCAPE)
    tenant, ns, local = F.col("_tenant"), F.col("_ns"), F.col("_local")
    valid = (well_formed & tenant.rlike(_ENTITY) & ~tenant.isin(*_DOT_SEGMENTS) & ns.rlike(_ENTITY)
             & ~ns.isin(*_DOT_SEGMENTS) & (F.length(local) > 0) & ~local.isin(*_DOT_SEGMENTS) & ~local.contains("/"))
    steps = (df.withColumn("_parts", parts)
             .withColumns({"_tenant": _part(1), "_ns": _part(2), "_raw": _part(-1), "_encoded": encoded})
             .withColumn("_decoded", F.when(~F.col("_encoded"), F.col("_raw"))
                         .when(~malformed, F.url_decode(F.col("_raw"))))
             .withColumn("_local", F.when(~F.col("_encoded") | (F.url_encode(F.col("_decoded")) == F.col("_raw")),
                                          F.col("_decoded")))
             .withColumn("_valid", F.coalesce(valid, F.lit(False))))
    named = steps.withColumns({
        "topic": F.when(F.col("_valid"), F.concat(F.lit(_TOPIC_PREFIX), tenant, F.lit("/"), ns, F.lit("/"), local)),
        "tenant": F.when(F.col("_valid"), tenant),
        "namespace": F.when(F.col("_valid"), F.concat(tenant, F.lit("/"), ns)),
    })
    return named.drop("_parts", "_tenant", "_ns", "_raw", "_encoded", "_decoded", "_local", "_valid")


# --------------------------------------------------------------------------- summarize


def age_buckets(min_age_s: int) -> list[tuple[str, int, int | None]]:
    """The histogram's buckets ``(label, lower_s, upper_s)``: from ``min_age_s`` up to the first
    edge above it, then between edges; every orphan is at least ``min_age_s`` old."""
    lowers = [min_age_s, *(edge for edge in AGE_EDGES_S if edge > min_age_s)]
    uppers: list[int | None] = [*lowers[1:], None]
    return [(f"{_duration(lo)}–{_duration(hi)}" if hi is not None else f"≥ {_duration(lo)}", lo, hi)
            for lo, hi in zip(lowers, uppers, strict=True)]


def _duration(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def _bucket_index(ctime_ms: Column, buckets: list[tuple[str, int, int | None]], now_ms: int) -> Column:
    """Which bucket a ledger created at ``ctime_ms`` falls in (younger than the first lower edge: the first)."""
    age_ms = F.lit(now_ms) - ctime_ms
    index: Column = F.lit(0)
    for i, (_, lower_s, _) in enumerate(buckets[1:], start=1):
        index = F.when(age_ms >= F.lit(lower_s * 1000), F.lit(i)).otherwise(index)
    return index


def _ledger_groups(orphans: DataFrame, buckets: list[tuple[str, int, int | None]], now_ms: int) -> list:
    """One Spark aggregation: orphan ledgers and bytes per (tenant, namespace, age bucket, kind)."""
    return (orphans.groupBy(F.coalesce("tenant", F.lit(UNKNOWN)).alias("tenant"),
                            F.coalesce("namespace", F.lit(UNKNOWN)).alias("namespace"),
                            _bucket_index(F.col("ctimeMs"), buckets, now_ms).alias("bucket"), "kind")
            .agg(F.count(F.lit(1)).alias("n"), F.sum("length").alias("bytes"))
            .collect())


def _object_groups(orphans: DataFrame) -> list:
    """Orphan objects and bytes per namespace of the topic each belongs to (``ORPHAN_OBJECTS.topic``:
    see :func:`_with_object_topic`); "(unknown)" when nothing proves whose it is."""
    named = _with_topic(orphans.select("size", "topic"), _full_name_parts(F.col("topic")), F.size("_parts") == 3,
                        F.lit(False))
    return (named.groupBy(F.coalesce("tenant", F.lit(UNKNOWN)).alias("tenant"),
                          F.coalesce("namespace", F.lit(UNKNOWN)).alias("namespace"))
            .agg(F.count(F.lit(1)).alias("n"), F.sum("size").alias("bytes"))
            .collect())


def _namespace_totals(ledger_groups: list, object_groups: list) -> list[NamespaceTotals]:
    """Merge the two small aggregates; biggest reclaimable total first, then by name."""
    totals: dict[tuple[str, str], list[int]] = {}
    for row in ledger_groups:
        entry = totals.setdefault((row["tenant"], row["namespace"]), [0, 0, 0, 0])
        entry[0] += row["n"]
        entry[1] += row["bytes"] or 0
    for row in object_groups:
        entry = totals.setdefault((row["tenant"], row["namespace"]), [0, 0, 0, 0])
        entry[2] += row["n"]
        entry[3] += row["bytes"] or 0
    out = [NamespaceTotals(tenant, namespace, *counts) for (tenant, namespace), counts in totals.items()]
    return sorted(out, key=lambda t: (-(t.orphan_ledger_bytes + t.orphan_object_bytes), t.namespace, t.tenant))


def _histogram(ledger_groups: list, buckets: list[tuple[str, int, int | None]]) -> list[AgeBucket]:
    counts = [[0, 0] for _ in buckets]
    for row in ledger_groups:
        counts[row["bucket"]][0] += row["n"]
        counts[row["bucket"]][1] += row["bytes"] or 0
    return [AgeBucket(label, lower, upper, n, size) for (label, lower, upper), (n, size) in zip(buckets, counts,
                                                                                              strict=True)]


def _by_kind(ledger_groups: list) -> tuple[dict[str, int], dict[str, int]]:
    """Orphan ledgers and bytes per kind, every kind the reference model knows listed (0 when none)."""
    counts = dict.fromkeys((k.value for k in LedgerKind), 0)
    sizes = dict(counts)
    for row in ledger_groups:
        counts[row["kind"]] = counts.get(row["kind"], 0) + row["n"]
        sizes[row["kind"]] = sizes.get(row["kind"], 0) + (row["bytes"] or 0)
    return counts, sizes


def _missing_shown(missing: DataFrame) -> list[MissingLedger]:
    rows = missing.orderBy("ledgerId", "kind", "topic", F.col("detail").asc_nulls_first()).limit(MISSING_SHOWN)
    return [MissingLedger(r["ledgerId"], r["kind"], r["topic"], r["detail"]) for r in rows.collect()]


def _count(df: DataFrame) -> int:
    return int(df.count())


def summarize(results: Results, inv: Inventories, min_age_s: int, now_ms: int) -> ReportData:
    """Counts, per-namespace totals, the age histogram, the first missing ledgers and the biggest
    orphans, each a Spark aggregation whose small result alone reaches the driver.  Each reads
    ``results`` again: pass them checkpointed or read back from Parquet, not freshly reconciled."""
    buckets = age_buckets(min_age_s)
    ledger_groups = _ledger_groups(results.orphan_ledgers, buckets, now_ms)
    object_groups = _object_groups(results.orphan_objects)
    missing_count = _count(results.missing_ledgers)
    by_kind, bytes_by_kind = _by_kind(ledger_groups)
    summary = ScanSummary(
        orphan_ledgers=sum(r["n"] for r in ledger_groups),
        orphan_offloaded_objects=sum(r["n"] for r in object_groups),
        missing_ledgers=missing_count,
        orphan_ledger_bytes=sum(r["bytes"] or 0 for r in ledger_groups),
        orphan_object_bytes=sum(r["bytes"] or 0 for r in object_groups),
        scanned_ledgers=_count(inv.bk_ledgers),
        references=_count(inv.references),
        scanned_objects=_count(inv.offloaded_objects),
        min_age_s=min_age_s,
        scanned_at_ms=now_ms,
        orphan_ledgers_by_kind=by_kind,
        orphan_ledger_bytes_by_kind=bytes_by_kind,
    )
    largest = results.orphan_ledgers.orderBy(F.col("length").desc(), "ledgerId").limit(LARGEST_SHOWN)
    return ReportData(summary=summary, by_namespace=_namespace_totals(ledger_groups, object_groups),
                      age_histogram=_histogram(ledger_groups, buckets),
                      missing=_missing_shown(results.missing_ledgers) if missing_count else [],
                      largest_orphans=[row.asDict() for row in largest.collect()])
