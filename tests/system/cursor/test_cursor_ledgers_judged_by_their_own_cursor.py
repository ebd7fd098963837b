"""Subscriptions ``a b`` and ``a+b`` on one topic, through the real ``ledger-deletion run`` and its admin
API: a request for a ledger of either one's cursor is judged against that cursor, never the other's.

A broker names the cursors ``a+b`` and ``a%2Bb`` (``Codec.encode``) and stamps each cursor ledger's
``pulsar/cursor`` with that name; the stamps here are written out by hand as it writes them.  ``a b``'s
cursor is on ledger 10 and ``a+b``'s on 30 (both in use).  Ledger 20 is stamped ``a+b``: ``a b``'s
next ledger, which its cursor has not recorded yet, so it is young and unproven (not yet) — though
the *other* cursor already uses a newer one.  Ledger 25 is stamped ``a%2Bb``: its own cursor already
uses 30, so it is proven superseded and deleted at once.  ``minLedgerAgeSeconds`` is an hour.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from metastore.formats import Position, ledger_path
from metastore.formats.custom_metadata import APPLICATION_KEY, COMPONENT_KEY, CURSOR_KEY, MANAGED_LEDGER_KEY
from tests.support.harness import PulsarLiteBroker
from tests.support.replicas_world import Replica, ReplicaWorld


@pytest.fixture
def world(tmp_path: Path, zk_url: str, pulsar_broker: PulsarLiteBroker) -> Iterator[ReplicaWorld]:
    w = ReplicaWorld(tmp_path, zk_url, pulsar_broker.service_url, partitions=1)
    w.config.write_text(w.config.read_text().replace("minLedgerAgeSeconds = 0", "minLedgerAgeSeconds = 3600"))
    yield w
    w.close()


def _delete(replica: Replica, topic: str, ledger_id: int, cursor: str) -> tuple[int, str]:
    """The admin API's synchronous delete of a cursor ledger: (HTTP status, ``outcome``)."""
    body = json.dumps({"topicName": topic, "ledgerComponent": "MANAGED_CURSOR", "ledgerType": "LEDGER",
                       "ledgerId": ledger_id, "cursorName": cursor}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{replica.port}/admin/v2/ledger-deletion/delete", body,
                                 {"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())["outcome"]
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())["outcome"]


def test_a_cursor_ledger_of_a_b_or_a_plus_b_is_judged_against_its_own_cursor(world: ReplicaWorld) -> None:
    w, topic = world.writer, world.topic
    ml_name = topic.removeprefix("persistent://").replace("/ns/", "/ns/persistent/")
    for ledger_id, cursor in ((10, "a+b"), (20, "a+b"), (25, "a%2Bb"), (30, "a%2Bb")):  # young: created now
        w.bk_ledger(ledger_id, {APPLICATION_KEY: "pulsar", COMPONENT_KEY: "managed-ledger",
                                MANAGED_LEDGER_KEY: ml_name, CURSOR_KEY: cursor})
    w.managed_ledger(topic, [1])
    w.cursor(topic, "a b", Position(1, 0), cursors_ledger_id=10)
    w.cursor(topic, "a+b", Position(1, 0), cursors_ledger_id=30)
    [replica] = world.add_replicas(1)
    replica.start().wait_ready()

    answers = {ledger_id: _delete(replica, topic, ledger_id, cursor)
               for ledger_id, cursor in ((10, "a+b"), (30, "a%2Bb"), (20, "a+b"), (25, "a%2Bb"))}

    assert answers == {10: (409, "still_in_use"), 30: (409, "still_in_use"),
                       20: (409, "not_yet"), 25: (200, "deleted")}, answers
    left = {lid for lid in (10, 20, 25, 30) if world.store.get(ledger_path(w.root, lid, w.layout)) is not None}
    assert left == {10, 20, 30}
    records = {r["request"]["ledgerId"]: r["outcome"] for r in replica.audit()}
    assert records.get(25) == "deleted" and records.get(20) != "deleted", records
