"""The orphan scan's inventories as Spark jobs over a real ZooKeeper, moto_server and a directory.

One small cluster is seeded once (every kind of ledger and reference the scan must tell
apart) and each inventory is read once; each test then checks one table's exact rows.
The expected rows are written out by hand from what was seeded, not computed by the
code under test.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
from kazoo.client import KazooClient
from kazoo.security import make_digest_acl

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata, schema_custom_metadata
from deletion_service.config import DeletionConfig
from deletion_service.errors import UserError
from deletion_service.orphans import snapshot
from deletion_service.orphans.inventory import (
    InventoryError,
    LocationPlan,
    ObjectLocation,
    OffloadScope,
    StoreSpec,
    bk_ledgers,
    object_locations,
    offloaded_objects,
    pulsar_references,
)
from deletion_service.orphans.reconcile import reconcile
from deletion_service.orphans.schemas import BK_LEDGERS, INVENTORIES, OFFLOADED_OBJECTS
from deletion_service.orphans.tables import Inventories
from deletion_service.testing.offload_objects import (
    build_index_v1,
    build_index_v2,
    build_mapfile_data,
    encode_ledger_info,
    pulsar_ledger_metadata,
)
from metastore import ABSENT, MetadataStore, open_store
from metastore.formats import (
    LedgerInfo,
    LedgerMetadata,
    OffloadContext,
    OffloadSegment,
    Position,
    Segment,
    decode_ledger_metadata,
    encode_ledger_metadata,
    ledger_path,
    managed_ledger_name,
)
from offloaders.allow_list import AllowList
from offloaders.filesystem import FileSystemOffloader
from offloaders.interface import (
    ObjectKind,
    ObjectName,
    OffloadNotAllowedError,
    StorageLocation,
    java_uuid,
    parse_object_name,
)
from offloaders.registry import OffloaderSettings
from offloaders.s3 import S3Offloader
from tests.support.harness import MotoS3Server, ZooKeeperServer

DAY_MS = 86_400_000
NOW_MS = int(time.time() * 1000)
OLD_MS = NOW_MS - 10 * DAY_MS
YOUNG_MS = NOW_MS - 60_000

T1 = "persistent://tenant-a/ns1/orders"
T2 = "persistent://tenant-b/ns2/café events"  # a name Pulsar URL-encodes: caf%C3%A9+events
GONE = "persistent://tenant-c/ns3/gone"  # deleted topic whose schema stayed
LONG_ID = 2**31 + 7  # above the short form: the layout's long-form subtree
UNDECODABLE = b"BookieMetadataFormatVersion\t9\n"
NO_ACCESS = 57  # a znode whose ACL keeps us out
UPSTREAM_META = {"s3managedledgeroffloaderformatversion": "1"}

U11 = java_uuid(11, -11)  # ledger 11: offloaded, BookKeeper copy deleted
U13 = java_uuid(13, 13)  # ledger 13: streaming segment
U14 = java_uuid(14, 14)  # ledger 14: offloaded by an older broker (no driver metadata)
U15 = java_uuid(15, 15)  # ledger 15: offloaded to a bucket outside the allow-list
U30 = java_uuid(30, -30)  # ledger 30 of T2: offloaded to the filesystem
U99 = java_uuid(-99, 99)  # objects nothing references
U77 = java_uuid(77, 77)


@dataclass
class Seeded:
    """The seeded cluster and what reading it gave."""

    bucket: str
    outside: str
    endpoint: str
    base: Path
    scope: OffloadScope
    inventories: Inventories
    plan: LocationPlan
    znode_ctime: dict[int, int]  # ledger id -> its znode's ctime, for the rows that use it


# --------------------------------------------------------------------------- seeding


def _bk(w: ClusterWriter, store: MetadataStore) -> dict[int, int]:
    """BookKeeper's ledgers: referenced, orphans, young, foreign, OPEN, IN_RECOVERY, unreadable."""
    w.ensure_layout()
    for reserved in ("idgen/ID-0000000001", "available/readonly", "cookies/bookie-1"):
        store.put(f"/ledgers/{reserved}", b"", ABSENT)
    for lid in (10, 13, 14, 15):
        w.bk_ledger(lid, pulsar_custom_metadata(T1), ctime_ms=OLD_MS)
    w.bk_ledger(20, pulsar_custom_metadata(T1, "sub one"), ctime_ms=OLD_MS, size=200)
    w.bk_ledger(21, {"application": "pulsar", "component": "compacted-ledger", "pulsar/compactedTopic": T1},
                ctime_ms=OLD_MS, size=300)
    w.bk_ledger(22, schema_custom_metadata(T1), ctime_ms=OLD_MS, size=50)
    w.bk_ledger(30, pulsar_custom_metadata(T2), ctime_ms=OLD_MS)
    w.bk_ledger(40, schema_custom_metadata(GONE), ctime_ms=OLD_MS, size=60)
    w.bk_ledger(50, pulsar_custom_metadata(T1), ctime_ms=OLD_MS, size=5000)  # orphan
    w.bk_ledger(51, pulsar_custom_metadata(T1), ctime_ms=YOUNG_MS)  # young
    w.bk_ledger(52, {"application": "hbase"}, ctime_ms=OLD_MS)  # foreign
    w.bk_ledger(53, pulsar_custom_metadata(T1), state="OPEN", ctime_ms=OLD_MS)
    w.bk_ledger(54, pulsar_custom_metadata(T1), state="IN_RECOVERY", ctime_ms=OLD_MS)
    w.bk_ledger(LONG_ID, pulsar_custom_metadata(T2), ctime_ms=OLD_MS, size=7)  # orphan, long form
    store.put(ledger_path("/ledgers", 55, "hierarchical"), UNDECODABLE, ABSENT)
    no_ctime = LedgerMetadata(quorum_size=1, ensemble_size=1, ack_quorum_size=1, state="CLOSED", length=9,
                              last_entry_id=0, segments=[Segment(0, ["b:3181"])],
                              custom_metadata={"application": b"pulsar", "note": b"\xff-bin"})
    store.put(ledger_path("/ledgers", 56, "hierarchical"), encode_ledger_metadata(no_ctime), ABSENT)
    return {lid: store.get(ledger_path("/ledgers", lid, "hierarchical")).ctime_ms for lid in (55, 56)}


def _unreadable_znode(hosts: str, path: str) -> None:
    """A ledger znode only another principal may read: the store refuses it, the rest of its batch is read."""
    client = KazooClient(hosts=hosts)
    client.start(timeout=10)
    try:
        client.create(path, b"secret", acl=[make_digest_acl("bookie", "pw", all=True)])
    finally:
        client.stop()
        client.close()


def _s3_context(msb: int, lsb: int, bucket: str, endpoint: str, deleted: bool = False) -> OffloadContext:
    return OffloadContext(uid_msb=msb, uid_lsb=lsb, complete=True, bookkeeper_deleted=deleted, driver_name="aws-s3",
                          driver_metadata={"bucket": bucket, "region": "us-east-1", "serviceEndpoint": endpoint})


def _pulsar(w: ClusterWriter, bucket: str, outside: str, endpoint: str) -> None:
    """Topics, cursors, schemas and offload contexts of every kind."""
    streaming = OffloadContext(complete=False, segments=[OffloadSegment(13, 13, complete=True)],
                               driver_name="aws-s3", driver_metadata={"bucket": bucket, "serviceEndpoint": endpoint})
    w.managed_ledger(T1, [
        LedgerInfo(10, entries=10, size=1024),
        LedgerInfo(11, entries=10, size=1024, offload_context=_s3_context(11, -11, bucket, endpoint, deleted=True)),
        LedgerInfo(12, entries=10, size=1024),  # missing: no znode in BookKeeper
        LedgerInfo(13, entries=10, size=1024, offload_context=streaming),
        LedgerInfo(14, entries=10, size=1024, offload_context=OffloadContext(uid_msb=14, uid_lsb=14, complete=True)),
        LedgerInfo(15, entries=10, size=1024, offload_context=_s3_context(15, 15, outside, endpoint)),
    ])
    w.cursor(T1, "sub one", Position(10, 0), cursors_ledger_id=20)
    w.cursor(T1, "in-store", Position(10, 0))  # state in the metadata store: references no ledger
    w.cursor(T1, "__compaction", Position(10, 0), properties={"CompactedTopicLedger": 21})
    w.schema(T1, [22])
    to_filesystem = OffloadContext(uid_msb=30, uid_lsb=-30, complete=True, driver_name="filesystem",
                                   driver_metadata={"storageBasePath": "null"})  # upstream's "unset"
    w.managed_ledger(T2, [LedgerInfo(30, entries=1, size=10, offload_context=to_filesystem)])
    w.schema(GONE, [40, 41])


def _objects(s3: MotoS3Server, bucket: str, base: Path) -> None:
    client = boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=bucket)
    index = build_index_v1(pulsar_ledger_metadata(managed_ledger_name(T1), entries=10, size=1024))
    bodies = {f"{U11}-ledger-11": b"entries", f"{U11}-ledger-11-index": index, U13: b"segment",
              f"{U13}-index": build_index_v2({13: encode_ledger_info(13, 10, 1024)}),
              f"{U99}-ledger-99": b"orphan data", f"{U99}-ledger-99-index": index,
              "-dash": b"1", "README.txt": b"22", "zz-notes": b"333"}  # three names no offloader writes
    for key, body in bodies.items():
        client.put_object(Bucket=bucket, Key=key, Body=body, Metadata=UPSTREAM_META)
    meta = pulsar_ledger_metadata(managed_ledger_name(T2), entries=1, size=10)
    for ml, lid, uid in ((managed_ledger_name(T2), 30, U30), ("tenant-b/ns2/persistent/old", 77, U77)):
        mapfile = base / ml / f"{lid}-{uid}"
        mapfile.mkdir(parents=True)
        (mapfile / "data").write_bytes(build_mapfile_data(meta))
        (mapfile / "index").write_bytes(b"SEQ\x06index")
    (base / "tenant-b/ns2/persistent/old/notes.txt").write_bytes(b"notes")


@pytest.fixture(scope="module")
def seeded(spark, zookeeper: ZooKeeperServer, s3_server: MotoS3Server,  # noqa: ANN001
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    chroot = f"/orphans-{uuid.uuid4().hex[:10]}"
    url = f"{zookeeper.url}{chroot}"
    bucket, outside = f"tiered-{uuid.uuid4().hex[:8]}", f"outside-{uuid.uuid4().hex[:8]}"
    base = (tmp_path_factory.mktemp("offload") / "root").resolve()
    base.mkdir()
    with open_store(url) as store:
        ctimes = _bk(ClusterWriter(store), store)
        _pulsar(ClusterWriter(store), bucket, outside, s3_server.endpoint)
    _unreadable_znode(f"{zookeeper.hosts}{chroot}", ledger_path("/ledgers", NO_ACCESS, "hierarchical"))
    _objects(s3_server, bucket, base)
    config = DeletionConfig.model_validate({
        "offloadAllowedBuckets": [bucket, "never-created"], "offloadFileSystemBaseDir": str(base),
        "managedLedgerOffloadDriver": "aws-s3", "managedLedgerOffloadBucket": bucket,
        "managedLedgerOffloadRegion": "us-east-1", "managedLedgerOffloadServiceEndpoint": s3_server.endpoint})
    scope = OffloadScope.of(config)
    spec = StoreSpec(url)
    references, offload_references, topics = pulsar_references(spark, spec, scope)
    plan = object_locations(scope, offload_references)
    inventories = Inventories(bk_ledgers(spark, spec), references, offload_references, topics,
                              offloaded_objects(spark, plan.listed, scope.settings))
    yield Seeded(bucket, outside, s3_server.endpoint, base, scope, inventories, plan, ctimes)


def rows(df) -> list[tuple]:  # noqa: ANN001
    """A table's rows as sorted tuples (maps as sorted item tuples, so rows compare exactly)."""
    def plain(value: object) -> object:
        return tuple(sorted(value.items())) if isinstance(value, dict) else value
    return sorted((tuple(plain(v) for v in r) for r in df.collect()), key=repr)


# --------------------------------------------------------------------------- BookKeeper's ledgers


def _meta(topic: str, cursor: str | None = None) -> tuple:
    """(application, component, managedLedger, cursor, schemaId, compactedTopic, customMetadata)."""
    custom = pulsar_custom_metadata(topic, cursor)
    stamp = None if cursor is None else cursor.replace(" ", "+")  # the cursor's name: its subscription URL-encoded
    return ("pulsar", "managed-ledger", managed_ledger_name(topic), stamp, None, None, tuple(sorted(custom.items())))


@pytest.mark.slow
def test_bk_ledgers_reads_every_ledger_znode(seeded: Seeded) -> None:
    schema_meta = {lid: tuple(sorted(schema_custom_metadata(t).items())) for lid, t in ((22, T1), (40, GONE))}
    compacted = (("application", "pulsar"), ("component", "compacted-ledger"), ("pulsar/compactedTopic", T1))
    try:
        decode_ledger_metadata(UNDECODABLE)
    except ValueError as e:
        undecodable_error = f"FormatError: {e}"
    expected = [
        (10, "CLOSED", OLD_MS, 1024, *_meta(T1), None, "data"),
        (13, "CLOSED", OLD_MS, 1024, *_meta(T1), None, "data"),
        (14, "CLOSED", OLD_MS, 1024, *_meta(T1), None, "data"),
        (15, "CLOSED", OLD_MS, 1024, *_meta(T1), None, "data"),
        (20, "CLOSED", OLD_MS, 200, *_meta(T1, "sub one"), None, "cursor"),
        (21, "CLOSED", OLD_MS, 300, "pulsar", "compacted-ledger", None, None, None, T1, compacted, None, "compacted"),
        (22, "CLOSED", OLD_MS, 50, "pulsar", "schema", None, None, "tenant-a/ns1/orders", None, schema_meta[22], None,
         "schema"),
        (30, "CLOSED", OLD_MS, 1024, *_meta(T2), None, "data"),
        (40, "CLOSED", OLD_MS, 60, "pulsar", "schema", None, None, "tenant-c/ns3/gone", None, schema_meta[40], None,
         "schema"),
        (50, "CLOSED", OLD_MS, 5000, *_meta(T1), None, "data"),
        (51, "CLOSED", YOUNG_MS, 1024, *_meta(T1), None, "data"),
        (52, "CLOSED", OLD_MS, 1024, "hbase", None, None, None, None, None, (("application", "hbase"),), None, "other"),
        (53, "OPEN", OLD_MS, 0, *_meta(T1), None, "data"),
        (54, "IN_RECOVERY", OLD_MS, 0, *_meta(T1), None, "data"),
        (55, None, seeded.znode_ctime[55], None, None, None, None, None, None, None, None, undecodable_error, None),
        (56, "CLOSED", seeded.znode_ctime[56], 9, "pulsar", None, None, None, None, None,
         (("application", "pulsar"), ("note", "\ufffd-bin")), None, "other"),
        (LONG_ID, "CLOSED", OLD_MS, 7, *_meta(T2), None, "data"),
        (NO_ACCESS, None, None, None, None, None, None, None, None, None, None,
         "MetadataStoreError: ZooKeeper refused access to /ledgers/00/0000/L0057: check the digest credentials", None),
    ]
    assert seeded.inventories.bk_ledgers.schema == BK_LEDGERS
    assert rows(seeded.inventories.bk_ledgers) == sorted(expected, key=repr)


def test_bk_ledgers_of_a_missing_layout_is_a_clear_error(spark, zk_url: str) -> None:  # noqa: ANN001
    with pytest.raises(InventoryError, match="no LAYOUT node under '/ledgers'"):
        bk_ledgers(spark, StoreSpec(zk_url))


def test_bk_ledgers_splits_the_layout_into_subtrees(spark, zk_url: str) -> None:  # noqa: ANN001
    """Ids 0..2,499 and 10,000..10,499 live under one top-level subtree (``00``): it is split
    into its 4-digit directories, one task each, and every ledger is read exactly once."""
    with open_store(zk_url) as store:
        writer = ClusterWriter(store)
        writer.ensure_layout()
        ids = [*range(0, 2500, 7), *range(10_000, 10_500, 3)]
        for lid in ids:
            writer.bk_ledger(lid, {"application": "pulsar"}, ctime_ms=OLD_MS, size=lid)
    df = bk_ledgers(spark, StoreSpec(zk_url), min_partitions=4)
    assert df.rdd.getNumPartitions() >= 2
    assert rows(df.select("ledgerId", "length", "error")) == sorted(((i, i, None) for i in ids), key=repr)


# --------------------------------------------------------------------------- Pulsar's references


def test_references_cover_every_kind(seeded: Seeded) -> None:
    expected = [
        (10, "ledger", T1, None, False, False),
        (11, "ledger", T1, None, True, True),
        (12, "ledger", T1, None, False, False),
        (13, "ledger", T1, None, False, False),
        (14, "ledger", T1, None, True, False),
        (15, "ledger", T1, None, True, False),
        (20, "cursor", T1, "sub+one", False, False),  # cursor "sub+one": subscription "sub one"
        (21, "compacted", T1, None, False, False),
        (22, "schema", T1, "tenant-a/ns1/orders", False, False),
        (30, "ledger", T2, None, True, False),
        (40, "schema", GONE, "tenant-c/ns3/gone", False, False),
        (41, "schema", GONE, "tenant-c/ns3/gone", False, False),
    ]
    assert rows(seeded.inventories.references) == sorted(expected, key=repr)


def test_offload_references_name_each_uuid_and_where_it_went(seeded: Seeded) -> None:
    here = f"s3://{seeded.bucket}?endpoint={seeded.endpoint}"
    expected = [
        (U11, 11, T1, here),
        (U13, 13, T1, here),  # the streaming segment (the context's own uuid is unset)
        (U14, 14, T1, here),  # no driver metadata: the cluster's managedLedgerOffload* settings
        (U15, 15, T1, f"s3://{seeded.outside}?endpoint={seeded.endpoint}"),
        (U30, 30, T2, f"filesystem://{seeded.base}"),
    ]
    assert rows(seeded.inventories.offload_references) == sorted(expected, key=repr)


def test_topics_are_the_managed_ledgers_that_exist(seeded: Seeded) -> None:
    assert rows(seeded.inventories.topics) == sorted([(T1, "tenant-a", "tenant-a/ns1", None),
                                                      (T2, "tenant-b", "tenant-b/ns2", None)], key=repr)


@pytest.mark.parametrize("path,data,error", [
    ("/managed-ledgers/tenant-a/ns1/persistent/broken", b"\xff\xff\xff",
     "cannot decode the managed-ledger node at /managed-ledgers/tenant-a/ns1/persistent/broken"),
    ("/managed-ledgers/tenant-a/ns1/persistent/orders/sub", b"\xff\xff\xff",
     "cannot decode the cursor node at /managed-ledgers/tenant-a/ns1/persistent/orders/sub"),
    ("/schemas/tenant-a/ns1/orders", b"\xff\xff\xff", "cannot decode the schema locator node at /schemas/tenant-a"),
    ("/managed-ledgers/tenant-a/cluster/ns1/persistent/v1", b"",
     r"/managed-ledgers/tenant-a/cluster holds \['ns1'\] besides 'persistent': V1 topic names"),
    ("/schemas/tenant-a/cluster/ns1/v1", b"", "/schemas/tenant-a/cluster/ns1 is not a schema node but has children"),
])
def test_metadata_that_hides_references_fails_the_inventory(spark, zk_url: str, path: str, data: bytes,  # noqa: ANN001
                                                             error: str) -> None:
    """Its references are unknown, so no orphan list computed without it is safe."""
    with open_store(zk_url) as store:
        ClusterWriter(store).managed_ledger(T1, [1])
        store.put(path, data, ABSENT)
    with pytest.raises(InventoryError, match=error):
        pulsar_references(spark, StoreSpec(zk_url))


# --------------------------------------------------------------------------- tiered storage


def test_locations_listed_and_refused(seeded: Seeded) -> None:
    here = f"s3://{seeded.bucket}?endpoint={seeded.endpoint}"
    assert [loc.location for loc in seeded.plan.listed] == [f"filesystem://{seeded.base}", here]
    refused = seeded.plan.refused
    assert set(refused) == {f"s3://{seeded.outside}?endpoint={seeded.endpoint}",
                            f"s3://never-created?endpoint={seeded.endpoint}"}
    assert "not in offloadAllowedBuckets" in refused[f"s3://{seeded.outside}?endpoint={seeded.endpoint}"]
    assert "NoSuchBucket" in refused[f"s3://never-created?endpoint={seeded.endpoint}"]


def test_offloaded_objects_of_a_bucket_and_a_directory(seeded: Seeded, s3_server: MotoS3Server) -> None:
    client = boto3.client("s3", endpoint_url=s3_server.endpoint, region_name="us-east-1")
    stored = {o["Key"]: (o["Size"], int(o["LastModified"].timestamp() * 1000))
              for o in client.list_objects_v2(Bucket=seeded.bucket)["Contents"]}
    here = f"s3://{seeded.bucket}?endpoint={seeded.endpoint}"
    parsed = {f"{U11}-ledger-11": (U11, 11, "data"), f"{U11}-ledger-11-index": (U11, 11, "index"),
              U13: (U13, None, "segment"), f"{U13}-index": (U13, None, "segment-index"),
              f"{U99}-ledger-99": (U99, 99, "data"), f"{U99}-ledger-99-index": (U99, 99, "index"),
              "-dash": (None, None, "other"), "README.txt": (None, None, "other"), "zz-notes": (None, None, "other")}
    expected = [(here, key, *parsed[key], *stored[key]) for key in parsed]
    fs = f"filesystem://{seeded.base}"
    for name, uid, lid, kind in ((f"{managed_ledger_name(T2)}/30-{U30}", U30, 30, "data"),
                                 (f"tenant-b/ns2/persistent/old/77-{U77}", U77, 77, "data"),
                                 ("tenant-b/ns2/persistent/old/notes.txt", None, None, "other")):
        path = seeded.base / name
        size = sum(p.stat().st_size for p in path.iterdir()) if path.is_dir() else path.stat().st_size
        expected.append((fs, name, uid, lid, kind, size, int(path.stat().st_mtime * 1000)))
    assert seeded.inventories.offloaded_objects.schema == OFFLOADED_OBJECTS
    assert rows(seeded.inventories.offloaded_objects) == sorted(expected, key=repr)


def test_listing_respects_the_allow_list(s3_server: MotoS3Server) -> None:
    offloader = S3Offloader(AllowList.of(buckets=["only-this"]))
    with pytest.raises(OffloadNotAllowedError, match="not in offloadAllowedBuckets"):
        offloader.list_objects(StorageLocation("aws-s3", {"bucket": "other", "serviceEndpoint": s3_server.endpoint}))


def test_object_names_read_back() -> None:
    uid = java_uuid(-0x2153_4110_2153_4111, 0xABC)  # has hex letters: upper case is another name
    assert parse_object_name(f"{uid}-ledger-42") == ObjectName(ObjectKind.DATA, uid, 42)
    assert parse_object_name(f"{uid}-ledger-42-index") == ObjectName(ObjectKind.INDEX, uid, 42)
    assert parse_object_name(uid) == ObjectName(ObjectKind.SEGMENT, uid)
    assert parse_object_name(f"{uid}-index") == ObjectName(ObjectKind.SEGMENT_INDEX, uid)
    for other in (f"{uid}-ledger-042", f"{uid}-ledger-{2**63}", uid.upper(), f"x{uid}", f"{uid}-ledger-"):
        assert parse_object_name(other) == ObjectName(ObjectKind.OTHER), other
    fs = FileSystemOffloader("/nonexistent")
    assert fs.describe_object(f"t/ns/persistent/x/7-{uid}") == ObjectName(ObjectKind.DATA, uid, 7)
    assert fs.describe_object(f"t/ns/x/7-{uid}").kind is ObjectKind.OTHER


def test_scope_names_locations_the_same_way_on_both_sides(tmp_path: Path) -> None:
    scope = OffloadScope(OffloaderSettings(filesystem_base_dir=tmp_path), "S3", (("bucket", "b"),))
    for driver in ("aws-s3", "S3", "aliyun-oss"):  # one family: one place
        assert scope.location_of(driver, {"bucket": "b", "serviceEndpoint": "HTTP://Host:80/"}).location == \
            "s3://b?endpoint=http://host"
    assert scope.location_of(None, {}).location == "s3://b"
    assert scope.location_of("aws-s3", {}) is None  # no bucket: cannot be named
    assert scope.location_of("filesystem", {"storageBasePath": "sub"}).location == f"filesystem://{tmp_path / 'sub'}"
    assert scope.location_of("google-cloud-storage", {"bucket": "g"}).location == "google-cloud-storage://g"
    for text in ("s3://b", "s3://b?endpoint=http://host", f"filesystem://{tmp_path}"):
        assert scope.parse(text).location == text
    assert scope.parse("google-cloud-storage://g") is None


# --------------------------------------------------------------------------- snapshot


def _small_inventories(spark) -> Inventories:  # noqa: ANN001
    data = {
        "bk_ledgers": [(1, "CLOSED", 5, 10, "pulsar", "managed-ledger", "t/ns/persistent/x", None, None, None,
                        {"application": "pulsar"}, None, "other"),
                       (2, None, None, None, None, None, None, None, None, None, None, "FormatError: bad", None)],
        "references": [(1, "ledger", "persistent://t/ns/x", None, False, False)],
        "offload_references": [(java_uuid(1, 1), 1, "persistent://t/ns/x", "s3://b")],
        "topics": [("persistent://t/ns/x", "t", "t/ns", None)],
        "offloaded_objects": [("s3://b", "k", None, None, "other", 3, 4)],
    }
    return Inventories(**{name: spark.createDataFrame(data[name], INVENTORIES[name]) for name in INVENTORIES})


def test_snapshot_round_trip(spark, tmp_path: Path) -> None:  # noqa: ANN001
    original = _small_inventories(spark)
    snapshot.write(original, tmp_path / "snap")
    assert sorted(os.listdir(tmp_path / "snap")) == sorted(f"{n}.parquet" for n in INVENTORIES)
    back = snapshot.read(spark, tmp_path / "snap")
    for (name, df), (_, again) in zip(original.items(), back.items(), strict=True):
        assert again.columns == INVENTORIES[name].fieldNames()
        assert rows(again) == rows(df), name


def test_snapshot_with_a_wrong_or_missing_table_is_refused(spark, tmp_path: Path) -> None:  # noqa: ANN001
    snap = tmp_path / "snap"
    snapshot.write(_small_inventories(spark), snap)
    renamed = spark.createDataFrame([("persistent://t/ns/x", "t", 1, None)],
                                    "topic string, tenant string, ns long, hidden string")
    renamed.write.mode("overwrite").parquet(str(snap / "topics.parquet"))
    with pytest.raises(UserError, match=r"topics\.parquet does not have the expected columns: missing namespace; "
                                        r"unexpected ns"):
        snapshot.read(spark, snap)
    retyped = spark.createDataFrame([("persistent://t/ns/x", "t", 1, None)],
                                    "topic string, tenant string, namespace long, hidden string")
    retyped.write.mode("overwrite").parquet(str(snap / "topics.parquet"))
    with pytest.raises(UserError, match="namespace is bigint, expected string"):
        snapshot.read(spark, snap)
    for part in (snap / "references.parquet").iterdir():
        part.unlink()
    (snap / "references.parquet").rmdir()
    with pytest.raises(UserError, match=r"references\.parquet is missing"):
        snapshot.read(spark, snap)


def test_object_location_lists_its_storage() -> None:
    loc = ObjectLocation("s3://b", "aws-s3", (("bucket", "b"),))
    assert loc.storage == StorageLocation("aws-s3", {"bucket": "b"}) and loc.is_s3


# --------------------------------------------------------------------------- the whole scan on the seeded cluster


def test_the_seeded_cluster_is_classified_exactly(seeded: Seeded) -> None:
    """Inventories read from real ZooKeeper, moto_server and a directory, reconciled in Spark.

    Never orphans: referenced (10, 13–15, 30), a cursor ledger (20), the compacted ledger of a
    live topic (21), schema ledgers still listed (22, 40), young (51, 56 with the znode's ctime),
    another application's (52), OPEN (53), IN_RECOVERY (54), unreadable (55, 57).  Missing:
    referenced but absent (12, 41) — not 11, whose data lives offloaded with BookKeeper's copy
    deleted.  Offloaded objects are all minutes old, so none is an orphan at a day's min age."""
    results = reconcile(seeded.inventories, 86_400, NOW_MS)
    orphans = rows(results.orphan_ledgers.select("ledgerId", "topic", "tenant", "namespace", "length"))
    assert orphans == sorted([(50, T1, "tenant-a", "tenant-a/ns1", 5000),
                              (LONG_ID, T2, "tenant-b", "tenant-b/ns2", 7)], key=repr)
    assert rows(results.missing_ledgers) == sorted([(12, "ledger", T1, None),
                                                    (41, "schema", GONE, "tenant-c/ns3/gone")], key=repr)
    assert rows(results.orphan_objects) == []

    fresh = reconcile(seeded.inventories, 0, int(time.time() * 1000) + 1000)  # everything is old enough now
    assert {r[0] for r in rows(fresh.orphan_ledgers.select("ledgerId"))} == {50, 51, 56, LONG_ID}
    objects = rows(fresh.orphan_objects.select("name", "uuid", "ledgerId", "objectKind"))
    assert objects == sorted([(f"{U99}-ledger-99", U99, 99, "data"), (f"{U99}-ledger-99-index", U99, 99, "index"),
                              (f"tenant-b/ns2/persistent/old/77-{U77}", U77, 77, "data")], key=repr)
