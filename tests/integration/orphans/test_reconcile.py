"""Reconciliation on Spark: the exact classification of hand-built cases, then random inventories
against the plain-Python reference (:mod:`tests.support.orphan_reference`), then the report's numbers.

One session-scoped SparkSession (``spark`` in conftest) and tables of a few hundred rows: the
point is the rules, not the scale (``bench/orphan_reconcile.py`` measures that).
"""

from __future__ import annotations

import random
import uuid as uuidlib

import pytest

from deletion_service.orphans import schemas
from deletion_service.orphans.reconcile import age_buckets, reconcile, summarize
from deletion_service.orphans.summary import MISSING_SHOWN, ReportData
from deletion_service.orphans.tables import Inventories, Results
from deletion_service.protocol.references import ledger_kind
from tests.support import orphan_reference as ref

NOW = 1_700_000_000_000
MIN_AGE_S = 3600
CUTOFF = NOW - MIN_AGE_S * 1000
OLD = NOW - 10 * 86400 * 1000
YOUNG = NOW - 60 * 1000
ORDERS = "persistent://t1/ns1/orders"
EVENTS = "persistent://t1/ns2/events"


def ledger(ledger_id: int, *, application: str | None = "pulsar", state: str | None = "CLOSED",
           ctime: int | None = OLD, length: int | None = 1000, component: str | None = "managed-ledger",
           managed_ledger: str | None = "t1/ns1/persistent/orders", cursor: str | None = None,
           schema_id: str | None = None, compacted_topic: str | None = None, error: str | None = None) -> dict:
    custom = {k: v for k, v in (("application", application), ("component", component), ("pulsar/cursor", cursor))
              if v is not None}
    return {"ledgerId": ledger_id, "state": state, "ctimeMs": ctime, "length": length, "application": application,
            "component": component, "managedLedger": managed_ledger, "cursor": cursor, "schemaId": schema_id,
            "compactedTopic": compacted_topic, "customMetadata": custom, "error": error,
            "kind": None if error is not None else ledger_kind(custom).value}


def reference(ledger_id: int, kind: str = "ledger", topic: str = ORDERS, detail: str | None = None,
              offloaded: bool = False, bookkeeper_deleted: bool = False) -> dict:
    return {"ledgerId": ledger_id, "kind": kind, "topic": topic, "detail": detail, "offloaded": offloaded,
            "bookkeeperDeleted": bookkeeper_deleted}


def obj(name: str, uid: str | None, ledger_id: int | None, kind: str, modified: int = OLD, size: int = 500,
        location: str = "aws-s3://bucket") -> dict:
    return {"location": location, "name": name, "uuid": uid, "ledgerId": ledger_id, "objectKind": kind,
            "size": size, "lastModifiedMs": modified}


def topic(name: str, hidden: str | None = None) -> dict:
    tenant, ns, _ = name.removeprefix("persistent://").split("/")
    return {"topic": name, "tenant": tenant, "namespace": f"{tenant}/{ns}", "hidden": hidden}


def frames(spark, inv: ref.Inventory) -> Inventories:
    def df(rows: list[dict], schema):
        return spark.createDataFrame(ref.tuples(rows, schema), schema)

    return Inventories(df(inv.bk_ledgers, schemas.BK_LEDGERS), df(inv.references, schemas.REFERENCES),
                       df(inv.offload_references, schemas.OFFLOAD_REFERENCES), df(inv.topics, schemas.TOPICS),
                       df(inv.offloaded_objects, schemas.OFFLOADED_OBJECTS))


def collected(results: Results) -> ref.Expected:
    rows = {name: [tuple(r) for r in df.collect()] for name, df in results.items()}
    assert len(rows["missing_ledgers"]) == len(set(rows["missing_ledgers"])), "one row per distinct reference"
    return ref.Expected(*(set(rows[name]) for name in ("orphan_ledgers", "missing_ledgers", "orphan_objects")))


# --------------------------------------------------------------------------- hand-built cases

LIVE_UUID, DEAD_UUID, YOUNG_UUID, SEGMENT_UUID, EXACT_UUID, FS_UUID = (str(uuidlib.UUID(int=i)) for i in range(1, 7))
BUCKET = "delayed-index-bucket"
HIDDEN = "the __compaction cursor keeps its state in cursor ledger 99"


def hand_built() -> ref.Inventory:
    bk = [
        ledger(1),  # referenced by the ledger list
        ledger(2),  # orphan data ledger
        ledger(3, ctime=YOUNG),  # young
        ledger(4, application="bookkeeper-tool", managed_ledger=None, component=None),  # foreign
        ledger(5, state="OPEN"),
        ledger(6, state="IN_RECOVERY"),
        ledger(7, state=None, application=None, component=None, managed_ledger=None, error="cannot decode"),
        ledger(8, component="compacted-ledger", managed_ledger=None, compacted_topic=ORDERS),  # no cursor names it
        ledger(9, component="compacted-ledger", managed_ledger=None, compacted_topic="persistent://t1/ns1/gone"),
        ledger(10, cursor="sub1"),  # referenced cursor ledger
        ledger(11, cursor="sub2", length=7000),  # unreferenced cursor ledger
        ledger(12, component="schema", managed_ledger=None, schema_id="t1/ns2/events"),  # unreferenced schema
        ledger(13, component="schema", managed_ledger=None, schema_id="t1/ns1/orders"),  # referenced schema
        ledger(14, managed_ledger="t2/ns/persistent/my+topic%C3%A9"),  # orphan, URL-encoded name
        ledger(15, managed_ledger="garbage"),  # orphan naming no topic
        ledger(16, ctime=None),  # no creation time: never a candidate
        ledger(17, ctime=CUTOFF),  # exactly min-age old: orphan
        ledger(18, ctime=CUTOFF + 1),  # a millisecond too young
        ledger(19, component="compacted-ledger", managed_ledger=None, compacted_topic=EVENTS),  # EVENTS hides it
        ledger(20, component="compacted-ledger", managed_ledger=None, compacted_topic=ORDERS),  # named: live
        ledger(21, component=BUCKET, cursor="sub1"),  # a live bucket: a cursor property names it
        ledger(22, component=BUCKET, cursor="gone-sub", length=300),  # an orphaned bucket (#22802)
        ledger(23, component="something-new"),  # a Pulsar component we do not know: reported (kind other)
    ]
    refs = [
        reference(1), reference(10, "cursor", detail="sub1"), reference(13, "schema", detail="t1/ns1/orders"),
        reference(5), reference(7),
        reference(100, offloaded=True, bookkeeper_deleted=True),  # offloaded away: not missing
        reference(101, offloaded=True),  # offloaded, BookKeeper copy should still exist: missing
        reference(102, "cursor", detail="sub3"), reference(102, "cursor", detail="sub3"),  # missing, once
        reference(103),  # plain missing
        reference(104, "schema", topic=EVENTS, detail="t1/ns2/events", offloaded=True, bookkeeper_deleted=True),
        reference(20, "compacted"), reference(21, "delayed-bucket", detail="sub1"),
        reference(105, "delayed-bucket", detail="sub1"),  # a bucket snapshot gone from BookKeeper: missing
    ]
    offload_refs = [{"uuid": LIVE_UUID, "ledgerId": 100, "topic": ORDERS, "location": "aws-s3://bucket"}]
    objects = [
        obj(f"{LIVE_UUID}-ledger-100", LIVE_UUID, 100, "data"),
        obj(f"{LIVE_UUID}-ledger-100-index", LIVE_UUID, 100, "index"),
        obj(f"{DEAD_UUID}-ledger-1", DEAD_UUID, 1, "data", size=4000),  # an abandoned offload of ledger 1
        obj(f"{DEAD_UUID}-ledger-1-index", DEAD_UUID, 1, "index", size=40),
        obj(f"{YOUNG_UUID}-ledger-5", YOUNG_UUID, 5, "data", modified=YOUNG),
        obj(SEGMENT_UUID, SEGMENT_UUID, None, "segment", size=9000),
        obj("notes/readme.txt", None, None, "other"),
        obj(f"{EXACT_UUID}-ledger-9", EXACT_UUID, 9, "data", modified=CUTOFF),
        obj(f"{FS_UUID}-ledger-2", FS_UUID, 2, "data"),  # an orphan data ledger's: its metadata names ORDERS
        obj(f"t1/ns2/persistent/events/77-{FS_UUID}", FS_UUID, 77, "data", location="filesystem:///base"),
    ]
    return ref.Inventory(bk, refs, offload_refs, [topic(ORDERS), topic(EVENTS, HIDDEN)], objects)


def orphan_row(ledger_id: int, topic_name: str | None, component: str = "managed-ledger", cursor: str | None = None,
               schema_id: str | None = None, ctime: int = OLD, length: int = 1000, kind: str | None = None) -> tuple:
    tenant = namespace = None
    if topic_name is not None:
        tenant, ns, _ = topic_name.removeprefix("persistent://").split("/", 2)
        namespace = f"{tenant}/{ns}"
    kind = kind or ledger_kind({"application": "pulsar", "component": component,
                                **({"pulsar/cursor": cursor} if cursor else {})}).value
    return (ledger_id, topic_name, tenant, namespace, component, cursor, schema_id, ctime, length, kind)


def test_hand_built_cases_classify_exactly(spark) -> None:
    inv = hand_built()
    got = collected(reconcile(frames(spark, inv), MIN_AGE_S, NOW))
    assert got.orphan_ledgers == {
        orphan_row(2, ORDERS),
        orphan_row(8, ORDERS, component="compacted-ledger"),  # its topic lives, but no compaction cursor names it
        orphan_row(9, "persistent://t1/ns1/gone", component="compacted-ledger"),  # its topic is gone (#21745)
        orphan_row(11, ORDERS, cursor="sub2", length=7000),
        orphan_row(12, EVENTS, component="schema", schema_id="t1/ns2/events"),
        orphan_row(14, "persistent://t2/ns/my topicé"),
        orphan_row(15, None),
        orphan_row(17, ORDERS, ctime=CUTOFF),
        orphan_row(22, ORDERS, component=BUCKET, cursor="gone-sub", length=300),
        orphan_row(23, ORDERS, component="something-new"),
    }
    assert got.missing_ledgers == {
        (101, "ledger", ORDERS, None),
        (102, "cursor", ORDERS, "sub3"),
        (103, "ledger", ORDERS, None),
        (104, "schema", EVENTS, "t1/ns2/events"),  # only a data ledger can be offloaded away
        (105, "delayed-bucket", ORDERS, "sub1"),
    }
    assert {(row[1], row[-1]) for row in got.orphan_objects} == {
        (f"{DEAD_UUID}-ledger-1", ORDERS), (f"{DEAD_UUID}-ledger-1-index", ORDERS),  # ledger 1's list: ORDERS
        (SEGMENT_UUID, None), (f"{EXACT_UUID}-ledger-9", None),  # 9 is a compacted ledger, listed nowhere
        (f"{FS_UUID}-ledger-2", ORDERS), (f"t1/ns2/persistent/events/77-{FS_UUID}", EVENTS)}
    assert got == ref.reconcile(inv, MIN_AGE_S, NOW)


def test_results_have_the_schemas_columns(spark) -> None:
    results = reconcile(frames(spark, hand_built()), MIN_AGE_S, NOW)
    for name, df in results.items():
        expected = schemas.RESULTS[name]
        assert [(f.name, f.dataType) for f in df.schema.fields] == [(f.name, f.dataType) for f in expected.fields]


def test_min_age_zero_makes_young_ledgers_candidates(spark) -> None:
    inv = hand_built()
    got = collected(reconcile(frames(spark, inv), 0, NOW))
    ids = {row[0] for row in got.orphan_ledgers}
    assert {3, 18} <= ids and not ids & {1, 4, 5, 6, 7, 10, 13, 16, 19, 20, 21}
    assert f"{YOUNG_UUID}-ledger-5" in {row[1] for row in got.orphan_objects}


# --------------------------------------------------------------------------- names, as pulsar_paths reads them

TRICKY_NAMES = [
    "t/ns/persistent/plain", "t/ns/persistent/a+b", "t/ns/persistent/%C3%A9t%C3%A9", "t/ns/persistent/a%2Fb",
    "t/ns/persistent/%zz", "t/ns/persistent/%4", "t/ns/persistent/%41", "t/ns/persistent/%c3%a9",
    "t/ns/persistent/%FF", "t/ns/persistent/%ED%A0%80", "t/ns/persistent/", "t/ns/persistent/.",
    "t/ns/persistent/..", "t/ns/persistent/%2E", "t/./persistent/x", "t/ns/non-persistent/x", "t/ns/persistent",
    "t/ns/persistent/x/y", "t\n/ns/persistent/x", "t/ns\n/persistent/x", "t/ns/persistent/x%0A", "tø/ns/persistent/x",
    "t=:.-_/n.s/persistent/a*b.c-d_e", "t/ns/persistent/raw space", "t/ns/persistent/%20", "", "/",
    "t/ns/persistent/a%2Bb", "t/ns/persistent/%E2%82%AC-partition-3",
]


def random_name(rng: random.Random) -> str:
    alphabet = "ab/%+.-_*:=25AcCfF\n é"
    pieces = [rng.choice(["t", "ab", "x.y", "", "."]), rng.choice(["ns", "n-s", ".."]),
              rng.choice(["persistent", "persistent", "nonpersistent"]),
              "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))]
    return "/".join(pieces[: rng.choice([3, 4, 4, 4, 5])]) if rng.random() < 0.2 else "/".join(pieces)


def test_owner_topics_are_read_as_pulsar_paths_reads_them(spark) -> None:
    rng = random.Random(7)
    names = TRICKY_NAMES + [random_name(rng) for _ in range(150)]
    bk = []
    for i, name in enumerate(names):
        bk.append(ledger(3 * i, managed_ledger=name))
        schema_name = name.replace("/persistent/", "/", 1)
        bk.append(ledger(3 * i + 1, component="schema", managed_ledger=None, schema_id=schema_name))
        full = "persistent://" + schema_name if rng.random() < 0.8 else schema_name
        bk.append(ledger(3 * i + 2, component="compacted-ledger", managed_ledger=None, compacted_topic=full))
    inv = ref.Inventory(bk, [], [], [], [])
    got = collected(reconcile(frames(spark, inv), MIN_AGE_S, NOW)).orphan_ledgers
    expected = ref.reconcile(inv, MIN_AGE_S, NOW).orphan_ledgers
    assert got == expected
    named = sum(1 for row in expected if row[1] is not None)
    assert 50 < named < len(expected) - 50  # many valid names and many invalid ones were tried


# --------------------------------------------------------------------------- random inventories vs the reference

TOPICS_POOL = [f"persistent://t{i % 3}/ns{i % 2}/topic-{i}" for i in range(8)]


def random_inventory(rng: random.Random, n: int = 300) -> ref.Inventory:
    ids = rng.sample(range(2 * n), n)
    ctimes = [None, CUTOFF, CUTOFF + 1, YOUNG, OLD, NOW - 5 * 86400_000, NOW - 40 * 86400_000, NOW - 200 * 86400_000]
    bk = []
    for lid in ids:
        topic_name = rng.choice(TOPICS_POOL)
        tenant, ns, local = topic_name.removeprefix("persistent://").split("/")
        bk.append(ledger(
            lid, application=rng.choice(["pulsar"] * 4 + ["other", None]),
            state=rng.choice(["CLOSED"] * 4 + ["OPEN", "IN_RECOVERY", None]), ctime=rng.choice(ctimes),
            length=rng.choice([None, 0, rng.randint(1, 10**9)]),
            component=rng.choice(["managed-ledger"] * 3 + ["schema", "compacted-ledger", BUCKET, None, "other"]),
            managed_ledger=rng.choice([f"{tenant}/{ns}/persistent/{local}", None, "bad/name"]),
            cursor=rng.choice([None, None, "sub"]), schema_id=rng.choice([f"{tenant}/{ns}/{local}", None]),
            compacted_topic=rng.choice([topic_name, "persistent://t9/ns/gone", None]),
            error=rng.choice([None] * 6 + ["unreadable"])))
    refs = [reference(rng.randrange(2 * n), rng.choice(["ledger", "ledger", "cursor", "schema", "compacted",
                                                        "delayed-bucket"]),
                      rng.choice(TOPICS_POOL), rng.choice([None, "sub", "t0/ns0/topic-0"]),
                      rng.random() < 0.3, rng.random() < 0.3) for _ in range(n)]
    uuids = [str(uuidlib.UUID(int=rng.getrandbits(128))) for _ in range(40)]
    offload_refs = [{"uuid": u, "ledgerId": rng.randrange(2 * n), "topic": rng.choice(TOPICS_POOL),
                     "location": None} for u in rng.sample(uuids, 20)]
    objects = []
    for i in range(n // 2):
        u = rng.choice(uuids + [None])
        lid = rng.choice([None, rng.randrange(2 * n)])
        on_fs = rng.random() < 0.2
        tenant, ns, local = rng.choice(TOPICS_POOL).removeprefix("persistent://").split("/")
        name = f"{tenant}/{ns}/persistent/{local}"
        objects.append(obj(f"{name}/{lid}-{u}" if on_fs else f"o{i}", u, lid,
                           rng.choice(["data", "index", "segment", "other"]),
                           modified=rng.choice([CUTOFF, CUTOFF + 1, YOUNG, OLD]), size=rng.randint(0, 10**6),
                           location="filesystem:///base" if on_fs else "aws-s3://bucket"))
    topics = [topic(t, rng.choice([None, HIDDEN])) for t in rng.sample(TOPICS_POOL, 5)]
    return ref.Inventory(bk, refs, offload_refs, topics, objects)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_random_inventories_match_the_reference(spark, seed: int) -> None:
    inv = random_inventory(random.Random(seed))
    got = collected(reconcile(frames(spark, inv), MIN_AGE_S, NOW))
    expected = ref.reconcile(inv, MIN_AGE_S, NOW)
    assert got == expected
    assert expected.orphan_ledgers and expected.missing_ledgers and expected.orphan_objects  # not vacuous


# --------------------------------------------------------------------------- summarize


def check_summary(spark, inv: ref.Inventory, min_age_s: int) -> ReportData:
    """Every number of ``summarize`` equals the reference's; returns the report data for more checks."""
    frames_ = frames(spark, inv)
    data = summarize(reconcile(frames_, min_age_s, NOW), frames_, min_age_s, NOW)
    expected = ref.reconcile(inv, min_age_s, NOW)
    counts = ref.summary_counts(inv, expected)
    assert {k: getattr(data.summary, k) for k in counts} == counts
    assert data.summary.orphan_ledgers_by_kind == ref.by_kind(expected)
    assert (data.summary.min_age_s, data.summary.scanned_at_ms) == (min_age_s, NOW)
    totals = {(t.tenant, t.namespace): [t.orphan_ledgers, t.orphan_ledger_bytes, t.orphan_objects,
                                        t.orphan_object_bytes] for t in data.by_namespace}
    assert len(totals) == len(data.by_namespace)
    assert totals == ref.by_namespace(inv, expected)
    sizes = [t.orphan_ledger_bytes + t.orphan_object_bytes for t in data.by_namespace]
    assert sizes == sorted(sizes, reverse=True)
    assert [(b.lower_s, b.upper_s, b.orphan_ledgers, b.orphan_ledger_bytes) for b in data.age_histogram] == \
        ref.histogram(expected.orphan_ledgers, min_age_s, NOW)
    assert [(m.ledger_id, m.kind, m.topic, m.detail) for m in data.missing] == \
        ref.first_missing(expected.missing_ledgers, MISSING_SHOWN)
    columns = ref.columns(schemas.ORPHAN_LEDGERS)
    assert [tuple(row[c] for c in columns) for row in data.largest_orphans] == ref.largest(expected.orphan_ledgers, 20)
    return data


def test_summary_of_the_hand_built_cases(spark) -> None:
    data = check_summary(spark, hand_built(), MIN_AGE_S)
    assert data.summary.to_json()["orphanLedgers"] == 10
    assert data.summary.to_json()["orphanLedgersByKind"] == {"data": 4, "cursor": 1, "schema": 1, "compacted": 2,
                                                             "delayed-bucket": 1, "other": 1}
    namespaces = {t.namespace: t for t in data.by_namespace}
    # the abandoned offload of ledger 1 (through its ledger list) and ledger 2's (through its own metadata)
    assert namespaces["t1/ns1"].orphan_objects == 3
    assert namespaces["t1/ns2"].orphan_objects == 1  # the filesystem layout's directory names EVENTS
    assert namespaces["(unknown)"].orphan_ledgers == 1 and namespaces["(unknown)"].orphan_objects == 2


@pytest.mark.parametrize("seed,min_age_s", [(5, MIN_AGE_S), (6, 3 * 86400)])
def test_summary_of_random_inventories(spark, seed: int, min_age_s: int) -> None:
    check_summary(spark, random_inventory(random.Random(seed)), min_age_s)


def test_age_buckets_start_at_min_age() -> None:
    assert age_buckets(3600) == [("1 h–2 d", 3600, 172800), ("2 d–7 d", 172800, 604800),
                                 ("7 d–30 d", 604800, 2592000), ("30 d–90 d", 2592000, 7776000),
                                 ("≥ 90 d", 7776000, None)]
    assert [b[1:] for b in age_buckets(10 * 86400)] == [(864000, 2592000), (2592000, 7776000), (7776000, None)]
    assert age_buckets(100 * 86400) == [("≥ 100 d", 8640000, None)]

