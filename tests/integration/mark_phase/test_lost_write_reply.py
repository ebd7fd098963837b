"""A trim (and a cursor reset) whose one write was applied but whose reply was lost.

The fault is injected with ``ReplyDropProxy`` (``tests/support/reply_drop_proxy.py``) in front of the REAL
ZooKeeper: the multi reaches the server and is applied; its reply is dropped with the connection.
Raising the store's "connection lost" error would tell the operator the trim failed while its ledgers
had left the list.  So trim reads the managed-ledger node back: one version later
with exactly its bytes means applied, reported as removed; the old version means nothing removed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from deletion_service.cursor.reset import reset_stored_cursor
from deletion_service.mark_phase.trim import trim
from metastore.factory import open_store
from metastore.formats import Position, decode_cursor, decode_managed_ledger, managed_ledger_path
from tests.support.harness import ZooKeeperServer
from tests.support.reply_drop_proxy import ReplyDropProxy

TOPIC = "persistent://t/ns/lost-trim-reply"


@pytest.fixture
def proxy(zookeeper: ZooKeeperServer) -> Iterator[ReplyDropProxy]:
    p = ReplyDropProxy(zookeeper.port)
    yield p
    p.close()


def test_trim_reads_back_a_write_whose_reply_was_lost(zookeeper: ZooKeeperServer, zk_url: str,
                                                       proxy: ReplyDropProxy) -> None:
    with open_store(zk_url) as direct:
        w = ClusterWriter(direct)
        w.ensure_layout()
        for lid in (1, 2, 3):
            w.bk_ledger(lid, pulsar_custom_metadata(TOPIC))
        w.managed_ledger(TOPIC, [1, 2, 3])
        w.cursor(TOPIC, "sub", Position(3, 0))
        via = open_store(zk_url.replace(zookeeper.hosts, f"127.0.0.1:{proxy.port}"))
        try:
            proxy.arm()
            result = trim(via, TOPIC, lambda requests: ["1:0"] * len(requests), offline=True)
        finally:
            via.close()
        assert proxy.dropped == 1, "trim's multi did not go through the proxy"
        node = direct.get(managed_ledger_path(TOPIC))
        assert node is not None and decode_managed_ledger(node.data).ledger_ids() == [3]
        assert result.aborted is None and result.removed == [1, 2], result


def test_cursor_reset_reads_back_a_write_whose_reply_was_lost(zookeeper: ZooKeeperServer, zk_url: str,
                                                                proxy: ReplyDropProxy) -> None:
    """The same fault under ``cursor reset`` (its write is a multi with the ledger list's version).
    Raising would make the operator rerun it and reset the cursor again: its epoch would bump twice."""
    with open_store(zk_url) as direct:
        w = ClusterWriter(direct)
        w.managed_ledger(TOPIC, [1, 2, 3])
        w.cursor(TOPIC, "sub", Position(3, 0))
        via = open_store(zk_url.replace(zookeeper.hosts, f"127.0.0.1:{proxy.port}"))
        try:
            proxy.arm()
            outcome = reset_stored_cursor(via, TOPIC, "sub", Position(1, 0))
        finally:
            via.close()
        assert proxy.dropped == 1, "the reset's multi did not go through the proxy"
        node = direct.get(f"{managed_ledger_path(TOPIC)}/sub")
        assert node is not None and decode_cursor(node.data).mark_delete == outcome.mark_delete == Position(1, -1)
        assert outcome.version == node.version
