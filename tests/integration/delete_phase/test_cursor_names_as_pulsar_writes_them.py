"""Cursors whose subscriptions need URL-encoding, on real ZooKeeper, read as a broker writes them.

A broker names a subscription's cursor ``Codec.encode(subscription)``: that string is the cursor's
node under the managed ledger and the ``pulsar/cursor`` stamp on each of its ledgers.  One topic
holds subscriptions with a space, a ``+``, a ``%``, a ``/`` and non-ASCII — among them ``a b`` and
``a+b``, whose cursors are ``a+b`` and ``a%2Bb``.  The stamps below are written out by hand, as
upstream's ``ManagedCursorImpl`` writes them; nothing here computes them with the code under test.

Each young, unreferenced cursor ledger is judged against its *own* cursor: it is proven superseded
exactly when the cursor its stamp names already uses a newer cursor ledger, and a request that
repeats the stamp describes the ledger.  The gatherer (the delete phase) and the metadata reading
(the orphan scan and the leak watcher) see the same cursors under the same names.
"""

from __future__ import annotations

import pytest

from deletion_service.cluster_writer import ClusterWriter
from deletion_service.delete_phase.rules.decision import Policy, Verdict, decide
from deletion_service.delete_phase.rules.verify_ledger import mismatch
from deletion_service.delete_phase.storage.gather import FactGatherer
from deletion_service.protocol.metadata_reading import topics_of_namespace
from deletion_service.protocol.request import PendingDeleteLedgerInfo
from metastore import MetadataStore, open_store
from metastore.formats import Position
from metastore.formats.custom_metadata import (
    APPLICATION_KEY,
    COMPONENT_KEY,
    CURSOR_KEY,
    MANAGED_LEDGER_KEY,
)
from offloaders.registry import OffloaderSettings
from tests.support.deletion_world import request

TOPIC = "persistent://names/ns/orders"
ML_NAME = "names/ns/persistent/orders"

#: subscription -> (its cursor's name, the cursor ledger it uses now, an older cursor ledger of it).
#: ``a b`` has not switched to its next ledger yet: 200 (stamped ``a+b``) is newer than its 100, and
#: only ``a+b``'s cursor (``a%2Bb``, on 300) is past it — which proves nothing about ``a b``'s.
CURSORS = {
    "a b": ("a+b", 100, 200),
    "a+b": ("a%2Bb", 300, 250),
    "50%": ("50%25", 400, 350),
    "x/y": ("x%2Fy", 500, 450),
    "é": ("%C3%A9", 600, 550),
}
#: The one ledger of the five whose own cursor has not recorded a newer ledger.
PENDING = 200


def _stamp(cursor: str) -> dict[str, str]:
    """A cursor ledger's custom metadata, as ``ManagedLedgerImpl.asyncCreateLedger`` merges
    ``buildBaseManagedLedgerMetadata`` and ``buildAdditionalMetadataForCursor(cursor)``."""
    return {APPLICATION_KEY: "pulsar", COMPONENT_KEY: "managed-ledger", MANAGED_LEDGER_KEY: ML_NAME,
            CURSOR_KEY: cursor}


def _seed(store: MetadataStore) -> None:
    w = ClusterWriter(store)
    w.ensure_layout()
    w.managed_ledger(TOPIC, [1])
    for subscription, (cursor, current, older) in CURSORS.items():
        for ledger_id in (current, older):
            w.bk_ledger(ledger_id, _stamp(cursor))  # young: created now, CLOSED
        w.cursor(TOPIC, subscription, Position(1, 0), cursors_ledger_id=current)
    assert sorted(store.children("/managed-ledgers/names/ns/persistent/orders")) == sorted(
        c for c, _, _ in CURSORS.values())  # the nodes are the encoded names


def _requests() -> list[PendingDeleteLedgerInfo]:
    return [request(TOPIC, ledger_id, "MANAGED_CURSOR", reason="orphan", cursorName=cursor)
            for cursor, current, older in CURSORS.values() for ledger_id in (current, older)]


@pytest.fixture
def store(zk_url: str):  # noqa: ANN201
    with open_store(zk_url) as s:
        _seed(s)
        yield s


def test_each_young_cursor_ledger_is_judged_against_its_own_cursor(store: MetadataStore) -> None:
    requests = _requests()
    facts = FactGatherer(store, store, OffloaderSettings()).gather(requests, [0] * len(requests))
    by_id = {r.ledger_id: (r, f) for r, f in zip(requests, facts, strict=True)}
    policy = Policy(min_ledger_age_s=3600)
    for subscription, (cursor, current, older) in CURSORS.items():
        req, f = by_id[current]
        assert f.unverifiable is None and f.transient is None, f
        assert f.references == (f"cursor ledger of subscription {subscription!r} of {TOPIC}",), f.references
        assert f.bookkeeper is not None and f.bookkeeper.metadata is not None
        assert mismatch(req, f.bookkeeper.metadata) is None  # the request repeats the stamp: it describes it
        req, f = by_id[older]
        assert f.unverifiable is None and not f.references, f
        assert f.bookkeeper is not None and f.bookkeeper.metadata is not None
        assert mismatch(req, f.bookkeeper.metadata) is None
        if older == PENDING:
            # "a b" still uses 100: 200 may be its next ledger, about to be recorded. Not proven.
            assert f.superseded is None, f.superseded
            assert decide(req, f, policy).verdict is Verdict.RECONSUME
        else:
            assert f.superseded == f"cursor {cursor!r} already uses newer cursor ledger {current}", (subscription, f)
            assert decide(req, f, policy).verdict is Verdict.DELETE_BOOKKEEPER


def test_the_scan_and_the_leak_watcher_read_the_same_cursors_under_the_same_names(store: MetadataStore) -> None:
    [meta] = topics_of_namespace(store, None, "names", "ns")
    assert {name: c.cursors_ledger_id for name, c in meta.cursors.items()} == {
        cursor: current for cursor, current, _ in CURSORS.values()}
    cursor_refs = {(r.ledger_id, r.detail) for r in meta.references() if r.kind.value == "cursor"}
    assert cursor_refs == {(current, cursor) for cursor, current, _ in CURSORS.values()}  # detail == the stamp
