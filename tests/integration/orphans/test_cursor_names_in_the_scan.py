"""The orphan scan on real ZooKeeper and Spark (local mode), over cursors whose subscriptions need
URL-encoding: ``a b`` and ``a+b`` on one topic (cursors ``a+b`` and ``a%2Bb``), and ``50%``, ``x/y``,
``é``.  Each cursor's current ledger is referenced and its older one is an orphan; every REFERENCES
row names its cursor exactly as that cursor's ledgers are stamped (``pulsar/cursor``), and every
orphan's request repeats its own stamp, which the delete phase then finds describes it and
unreferenced.  The stamps are written out by hand, as upstream's ``ManagedCursorImpl`` writes them.
"""

from __future__ import annotations

import time

from deletion_service.cluster_writer import ClusterWriter
from deletion_service.delete_phase.rules.verify_ledger import mismatch
from deletion_service.delete_phase.storage.gather import FactGatherer
from deletion_service.orphans.inventory import StoreSpec, bk_ledgers, pulsar_references
from deletion_service.orphans.reconcile import reconcile
from deletion_service.orphans.requests import request_for
from deletion_service.orphans.schemas import OFFLOADED_OBJECTS
from deletion_service.orphans.tables import Inventories
from deletion_service.protocol.request import PendingDeleteLedgerInfo
from metastore import open_store
from metastore.formats import Position
from metastore.formats.custom_metadata import APPLICATION_KEY, COMPONENT_KEY, CURSOR_KEY, MANAGED_LEDGER_KEY
from offloaders.registry import OffloaderSettings

TOPIC = "persistent://scan-names/ns/orders"
ML_NAME = "scan-names/ns/persistent/orders"
OLD_MS = int(time.time() * 1000) - 3 * 86_400_000
#: subscription -> (its cursor's name, the cursor ledger it uses, an older one of it nothing references)
CURSORS = {
    "a b": ("a+b", 10, 1),
    "a+b": ("a%2Bb", 30, 3),
    "50%": ("50%25", 40, 4),
    "x/y": ("x%2Fy", 50, 5),
    "é": ("%C3%A9", 60, 6),
}


def test_cursor_ledgers_are_referenced_and_orphaned_under_the_names_they_are_stamped_with(
        spark, zk_url: str) -> None:  # noqa: ANN001
    with open_store(zk_url) as store:
        w = ClusterWriter(store)
        w.ensure_layout()
        w.managed_ledger(TOPIC, [100])
        w.bk_ledger(100, {APPLICATION_KEY: "pulsar", COMPONENT_KEY: "managed-ledger", MANAGED_LEDGER_KEY: ML_NAME},
                    ctime_ms=OLD_MS)
        for subscription, (cursor, current, older) in CURSORS.items():
            for ledger_id in (current, older):
                w.bk_ledger(ledger_id, {APPLICATION_KEY: "pulsar", COMPONENT_KEY: "managed-ledger",
                                        MANAGED_LEDGER_KEY: ML_NAME, CURSOR_KEY: cursor}, ctime_ms=OLD_MS)
            w.cursor(TOPIC, subscription, Position(100, 0), cursors_ledger_id=current)
    refs, offload_refs, topics = pulsar_references(spark, StoreSpec(zk_url))
    inventories = Inventories(bk_ledgers(spark, StoreSpec(zk_url)), refs, offload_refs, topics,
                              spark.createDataFrame([], OFFLOADED_OBJECTS))
    cursor_refs = {(r["ledgerId"], r["detail"]) for r in refs.collect() if r["kind"] == "cursor"}
    assert cursor_refs == {(current, cursor) for cursor, current, _ in CURSORS.values()}

    orphans = reconcile(inventories, 0, int(time.time() * 1000) + 1000).orphan_ledgers.collect()
    assert {(r["ledgerId"], r["kind"], r["cursor"]) for r in orphans} == {
        (older, "cursor", cursor) for cursor, _, older in CURSORS.values()}
    requests = [request_for(r.asDict(), int(time.time() * 1000)) for r in orphans]
    assert all(isinstance(r, PendingDeleteLedgerInfo) for r in requests), requests
    sent = [r for r in requests if isinstance(r, PendingDeleteLedgerInfo)]
    assert {(r.ledger_id, r.cursor_name) for r in sent} == {(older, cursor) for cursor, _, older in CURSORS.values()}
    with open_store(zk_url) as store:
        facts = FactGatherer(store, store, OffloaderSettings()).gather(sent, [0] * len(sent))
    for req, f in zip(sent, facts, strict=True):
        assert f.unverifiable is None and not f.references, (req.ledger_id, f)
        assert f.bookkeeper is not None and f.bookkeeper.metadata is not None
        assert mismatch(req, f.bookkeeper.metadata) is None, req.ledger_id
