"""The scan and the delete phase agree with the one reference model, kind by kind, on a real store.

One cluster is seeded in real ZooKeeper with a live and an orphaned ledger of every kind
Pulsar writes (data, offloaded copy, cursor, schema, compacted live / orphaned / hidden by a
compaction cursor kept in a cursor ledger, delayed-delivery bucket live / orphaned) and is
then asked three ways:

* the model itself (:mod:`deletion_service.protocol.references`), over nodes this test decodes;
* the scan: its Spark inventory (``pulsar_references``, ``bk_ledgers``, ``offloaded_objects``)
  and its reconciliation (orphans at a min age of 0);
* the delete phase: ``FactGatherer.gather`` (whose ``_Owner.references`` is the model's) for a
  ``reason: orphan`` request per ledger, built from the ledger's own BookKeeper metadata.

Every ledger is judged the same by all three, and the verdicts are the hand-written ones.
A malformed bucket value (no ledger id) is never guessed at by any of them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deletion_service.cluster_writer import (
    ClusterWriter,
    bucket_custom_metadata,
    compacted_custom_metadata,
    pulsar_custom_metadata,
    schema_custom_metadata,
)
from deletion_service.delete_phase.storage.gather import FactGatherer
from deletion_service.orphans.inventory import (
    InventoryError,
    OffloadScope,
    StoreSpec,
    bk_ledgers,
    object_locations,
    offloaded_objects,
    pulsar_references,
)
from deletion_service.orphans.reconcile import reconcile
from deletion_service.orphans.tables import Inventories
from deletion_service.protocol.references import (
    DELAYED_BUCKET_PREFIX,
    TopicMetadata,
    UnreadableReference,
)
from deletion_service.protocol.request import PendingDeleteLedgerInfo
from metastore import MetadataStore, open_store
from metastore.formats import (
    LedgerInfo,
    OffloadContext,
    Position,
    cursor_path,
    decode_cursor,
    decode_managed_ledger,
    decode_schema_locator,
    managed_ledger_name,
    managed_ledger_path,
    schema_path,
)
from offloaders.allow_list import AllowList
from offloaders.interface import java_uuid
from offloaders.registry import OffloaderSettings
from tests.support.deletion_world import request

DAY_MS = 86_400_000
OLD_MS = int(time.time() * 1000) - 3 * DAY_MS
LIVE = "persistent://t/ns/live"  # every kind, live, plus orphans its metadata no longer names
HIDING = "persistent://t/ns/hiding"  # its __compaction cursor keeps its state in a cursor ledger
GONE = "persistent://t/ns/gone"  # deleted: only its ledgers are left
BROKEN = "persistent://t/ns/broken"  # a bucket property that names no ledger
U_LIVE, U_STALE = java_uuid(2, 2), java_uuid(2, 99)  # ledger 2's offload, and a failed earlier attempt's


@dataclass(frozen=True)
class Ledger:
    """One seeded ledger: what it is, whose, and the verdict every reader must reach."""

    ledger_id: int
    component: str  # the request's ledgerComponent
    topic: str
    custom: dict[str, str]
    referenced: bool
    cursor: str | None = None


LEDGERS = [
    Ledger(1, "MANAGED_LEDGER", LIVE, pulsar_custom_metadata(LIVE), True),
    Ledger(2, "MANAGED_LEDGER", LIVE, pulsar_custom_metadata(LIVE), True),  # offloaded too
    Ledger(3, "MANAGED_CURSOR", LIVE, pulsar_custom_metadata(LIVE, "sub"), True, "sub"),
    Ledger(4, "DELAYED_INDEX_BUCKET", LIVE, bucket_custom_metadata(LIVE, "delayed"), True, "delayed"),
    Ledger(5, "SCHEMA_STORAGE", LIVE, schema_custom_metadata(LIVE), True),
    Ledger(6, "COMPACTED_LEDGER", LIVE, compacted_custom_metadata(LIVE), True),
    Ledger(7, "COMPACTED_LEDGER", LIVE, compacted_custom_metadata(LIVE), False),  # superseded by 6
    Ledger(8, "DELAYED_INDEX_BUCKET", LIVE, bucket_custom_metadata(LIVE, "delayed"), False, "delayed"),  # merged
    Ledger(9, "DELAYED_INDEX_BUCKET", LIVE, bucket_custom_metadata(LIVE, "gone-sub"), False, "gone-sub"),
    Ledger(10, "COMPACTED_LEDGER", GONE, compacted_custom_metadata(GONE), False),  # upstream leak #21745
    Ledger(11, "MANAGED_LEDGER", GONE, pulsar_custom_metadata(GONE), False),
    Ledger(12, "MANAGED_CURSOR", GONE, pulsar_custom_metadata(GONE, "old"), False, "old"),
    Ledger(13, "SCHEMA_STORAGE", GONE, schema_custom_metadata(GONE), False),
    Ledger(20, "MANAGED_LEDGER", HIDING, pulsar_custom_metadata(HIDING), True),
    Ledger(21, "MANAGED_CURSOR", HIDING, pulsar_custom_metadata(HIDING, "__compaction"), True, "__compaction"),
    Ledger(22, "COMPACTED_LEDGER", HIDING, compacted_custom_metadata(HIDING), True),  # hidden: may be the newest
]
TOPICS = (LIVE, HIDING)


def _seed(store: MetadataStore, base: Path) -> None:
    w = ClusterWriter(store)
    w.ensure_layout()
    for ledger in LEDGERS:
        w.bk_ledger(ledger.ledger_id, ledger.custom, ctime_ms=OLD_MS)
    offload = OffloadContext(uid_msb=2, uid_lsb=2, complete=True, driver_name="filesystem",
                             driver_metadata={"storageBasePath": str(base)})
    w.managed_ledger(LIVE, [1, LedgerInfo(2, entries=10, size=1024, offload_context=offload)])
    w.cursor(LIVE, "sub", Position(1, 0), cursors_ledger_id=3)
    w.cursor(LIVE, "delayed", Position(1, 0), cursor_properties={f"{DELAYED_BUCKET_PREFIX}1_2": "4",
                                                                 "unrelated": "8"})
    w.cursor(LIVE, "__compaction", Position(1, 0), properties={"CompactedTopicLedger": 6})
    w.schema(LIVE, [5])
    w.managed_ledger(HIDING, [20])
    w.cursor(HIDING, "__compaction", Position(20, 0), cursors_ledger_id=21, properties={"CompactedTopicLedger": 20})
    for uid in (U_LIVE, U_STALE):  # the live offload and a failed attempt's leftovers, as upstream lays them out
        mapfile = base / managed_ledger_name(LIVE) / f"2-{uid}"
        mapfile.mkdir(parents=True)
        (mapfile / "data").write_bytes(b"SEQ")
        (mapfile / "index").write_bytes(b"SEQ")


def _model(store: MetadataStore, topic: str) -> TopicMetadata:
    """The model's view of one topic, from nodes this test reads and decodes itself."""
    ml = store.get(managed_ledger_path(topic))
    cursors = {name: decode_cursor(store.get(cursor_path(topic, name)).data)
               for name in store.children(managed_ledger_path(topic))} if ml is not None else {}
    schema = store.get(schema_path(topic))
    return TopicMetadata(topic, decode_managed_ledger(ml.data) if ml is not None else None, cursors,
                         decode_schema_locator(schema.data) if schema is not None else None,
                         topic.removeprefix("persistent://") if schema is not None else None)


def _request(ledger: Ledger) -> PendingDeleteLedgerInfo:
    extra: dict[str, object] = {}
    if ledger.cursor is not None:
        extra["cursorName"] = ledger.cursor
    if ledger.component == "SCHEMA_STORAGE":
        extra["schemaId"] = ledger.topic.removeprefix("persistent://")
    return request(ledger.topic, ledger.ledger_id, ledger.component, reason="orphan", **extra)


def _offload_request(uid_msb: int, uid_lsb: int, base: Path) -> PendingDeleteLedgerInfo:
    context = {"uidMsb": uid_msb, "uidLsb": uid_lsb, "driverName": "filesystem",
               "driverMetadata": {"storageBasePath": str(base)}}
    return request(LIVE, 2, ledgerType="OFFLOAD_LEDGER", reason="orphan", offloadContext=context)


@dataclass
class Seeded:
    url: str
    base: Path
    settings: OffloaderSettings
    inventories: Inventories


@pytest.fixture(scope="module")
def seeded(spark, zookeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:  # noqa: ANN001
    url = f"{zookeeper.url}/agree-{uuid.uuid4().hex[:10]}"
    base = (tmp_path_factory.mktemp("offload") / "root").resolve()
    with open_store(url) as store:
        _seed(store, base)
    settings = OffloaderSettings(AllowList(), filesystem_base_dir=base)
    scope = OffloadScope(settings)
    refs, offload_refs, topics = pulsar_references(spark, StoreSpec(url), scope)
    plan = object_locations(scope, offload_refs)
    yield Seeded(url, base, settings, Inventories(bk_ledgers(spark, StoreSpec(url)), refs, offload_refs, topics,
                                                  offloaded_objects(spark, plan.listed, settings)))


def test_the_scans_reference_rows_are_the_models(seeded: Seeded) -> None:
    with open_store(seeded.url) as store:
        models = {topic: _model(store, topic) for topic in TOPICS}
    expected = {(ref.ledger_id, ref.kind.value, ref.topic, ref.detail, ref.offloaded, ref.bookkeeper_deleted)
                for meta in models.values() for ref in meta.references()}  # REFERENCES' columns
    assert {tuple(r) for r in seeded.inventories.references.collect()} == expected
    assert {(r.ledger_id, r.kind.value) for r in (ref for m in models.values() for ref in m.references())} == {
        (1, "ledger"), (2, "ledger"), (3, "cursor"), (4, "delayed-bucket"), (5, "schema"), (6, "compacted"),
        (20, "ledger"), (21, "cursor"), (20, "compacted")}
    hidden = {r["topic"]: r["hidden"] for r in seeded.inventories.topics.collect()}
    assert hidden == {topic: models[topic].hidden for topic in TOPICS}
    assert hidden[LIVE] is None and "cursor ledger 21" in hidden[HIDING]
    offloads = {(r["uuid"], r["ledgerId"]) for r in seeded.inventories.offload_references.collect()}
    assert offloads == {(o.uuid, o.ledger_id) for m in models.values() for o in m.offload_references()} == {
        (U_LIVE, 2)}


def test_every_ledger_is_judged_alike_by_the_scan_and_the_delete_phase(seeded: Seeded) -> None:
    found = reconcile(seeded.inventories, 0, int(time.time() * 1000) + 1000).orphan_ledgers.collect()
    orphans = {r["ledgerId"] for r in found}
    with open_store(seeded.url) as store:
        gatherer = FactGatherer(store, store, seeded.settings)
        facts = gatherer.gather([_request(ledger) for ledger in LEDGERS], [0] * len(LEDGERS))
    verdicts = {}
    for ledger, fact in zip(LEDGERS, facts, strict=True):
        assert fact.unverifiable is None and fact.transient is None, (ledger, fact)
        verdicts[ledger.ledger_id] = (bool(fact.references), ledger.ledger_id not in orphans)
    assert verdicts == {ledger.ledger_id: (ledger.referenced, ledger.referenced) for ledger in LEDGERS}
    assert {r["ledgerId"]: r["kind"] for r in found} == {
        7: "compacted", 8: "delayed-bucket", 9: "delayed-bucket", 10: "compacted", 11: "data", 12: "cursor",
        13: "schema"}
    hidden = facts[[ledger.ledger_id for ledger in LEDGERS].index(22)].references
    assert any("cursor ledger 21" in why for why in hidden), hidden


def test_offloaded_copies_are_referenced_by_the_uuid_a_context_names(seeded: Seeded) -> None:
    """The live uuid's objects are in use for both; the failed attempt's are an orphan for both."""
    orphans = reconcile(seeded.inventories, 0, int(time.time() * 1000) + 1000).orphan_objects.collect()
    assert {(r["uuid"], r["ledgerId"]) for r in orphans} == {(U_STALE, 2)}
    with open_store(seeded.url) as store:
        live, stale = FactGatherer(store, store, seeded.settings).gather(
            [_offload_request(2, 2, seeded.base), _offload_request(2, 99, seeded.base)], [0, 0])
    assert live.references and not stale.references and stale.unverifiable is None
    assert {r["topic"] for r in orphans} == {LIVE}  # whose they are: what the request needs


def test_a_malformed_bucket_value_is_never_guessed(spark, zk_url: str, tmp_path: Path) -> None:  # noqa: ANN001
    """A bucket property whose value names no ledger hides which bucket ledger is live: the model
    raises, the scan refuses to produce any orphan list, the delete phase cannot verify."""
    with open_store(zk_url) as store:
        w = ClusterWriter(store)
        w.ensure_layout()
        w.bk_ledger(30, bucket_custom_metadata(BROKEN, "s"), ctime_ms=OLD_MS)
        w.bk_ledger(31, pulsar_custom_metadata(BROKEN), ctime_ms=OLD_MS)
        w.managed_ledger(BROKEN, [])
        w.cursor(BROKEN, "s", Position(1, 0), cursor_properties={f"{DELAYED_BUCKET_PREFIX}1_9": "thirty"})
        with pytest.raises(UnreadableReference, match="not a ledger id"):
            list(_model(store, BROKEN).references())
        facts = FactGatherer(store, store, OffloaderSettings()).gather(
            [request(BROKEN, 30, "DELAYED_INDEX_BUCKET", reason="orphan", cursorName="s"),
             request(BROKEN, 31, reason="orphan")], [0, 0])
    assert all(f.unverifiable is not None and "not a ledger id" in f.unverifiable for f in facts), facts
    with pytest.raises(InventoryError, match="bucket property .* not a ledger id"):
        pulsar_references(spark, StoreSpec(zk_url))
