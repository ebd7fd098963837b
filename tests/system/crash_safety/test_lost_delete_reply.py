"""A delete whose reply was lost is audited as "deleted", not "absent".

The fault: ZooKeeper applies a delete multi-op and its reply never reaches the daemon (the
connection drops in between).  No real ZooKeeper does that on demand, so a loopback TCP proxy
(``ReplyDropProxy`` of ``tests/support/reply_drop_proxy.py``) sits in front of the REAL ZooKeeper:
it forwards every request and reply unchanged, except that when armed it lets the next multi request
through, waits for the server's reply to it (so the multi is known to be applied, or refused), drops
that reply and closes the connection.  kazoo reconnects through the proxy within the same session,
as it does after a network blip.

Retrying ``delete_many`` whole would find the znodes gone and record "absent" for ledgers this
daemon deleted (and ``deleted_total`` would undercount).  So the store reads back what is in doubt
and the record says "deleted (reply lost; gone on re-read …)"; a batch refused with its reply lost
is resolved by the same re-read: only its nodes still at their verified version are sent again.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from metastore.factory import open_store
from metastore.formats import ledger_path
from metastore.interface import NodeDeleteOutcome
from tests.support.cli_runner import run_cli
from tests.support.daemon_ledgers import TOPIC, request_file
from tests.support.daemon_process import data_dir
from tests.support.deletion_world import make_world, request
from tests.support.harness import PulsarLiteBroker, ZooKeeperServer, free_port
from tests.support.reply_drop_proxy import ReplyDropProxy

__all__ = ["data_dir"]  # the fixture: it stops a broker left behind


@pytest.fixture
def proxy(zookeeper: ZooKeeperServer) -> Iterator[ReplyDropProxy]:
    p = ReplyDropProxy(zookeeper.port)
    yield p
    p.close()


def _seed(url: str, ids: range) -> dict[int, str]:
    with open_store(url) as store:
        w = ClusterWriter(store)
        w.ensure_layout()
        for lid in ids:
            w.bk_ledger(lid, pulsar_custom_metadata(TOPIC))
    return {lid: ledger_path("/ledgers", lid, "hierarchical") for lid in ids}


def _via(proxy: ReplyDropProxy, zookeeper: ZooKeeperServer, zk_url: str) -> str:
    """The test's chroot, reached through the proxy."""
    return zk_url.replace(zookeeper.hosts, f"127.0.0.1:{proxy.port}")


def test_store_resolves_a_lost_delete_reply_by_reading_back(
        zookeeper: ZooKeeperServer, zk_url: str, proxy: ReplyDropProxy) -> None:
    paths = _seed(zk_url, range(9001, 9007))
    with open_store(zk_url) as direct:
        versions = {lid: direct.get(p).version for lid, p in paths.items()}  # type: ignore[union-attr]
        store = open_store(_via(proxy, zookeeper, zk_url))
        try:
            # applied, reply lost: gone with its whole batch on re-read
            proxy.arm()
            first = store.delete_many([(paths[lid], versions[lid]) for lid in (9001, 9002, 9003)])
            assert proxy.dropped == 1
            assert first == {paths[lid]: NodeDeleteOutcome.DELETED_REPLY_LOST for lid in (9001, 9002, 9003)}

            # refused (one changed, one deleted by someone else), reply lost: not applied, since some of
            # its nodes are still there; only the one still at its verified version is sent again
            direct.put(paths[9005], b"changed", versions[9005])
            direct.delete(paths[9006], versions[9006])
            proxy.arm()
            second = store.delete_many([(paths[lid], versions[lid]) for lid in (9004, 9005, 9006)])
            assert proxy.dropped == 2
            assert second == {paths[9004]: NodeDeleteOutcome.DELETED, paths[9005]: NodeDeleteOutcome.BAD_VERSION,
                              paths[9006]: NodeDeleteOutcome.ABSENT}
            assert direct.get(paths[9005]) is not None and direct.get(paths[9004]) is None
        finally:
            store.close()


def test_daemon_audits_a_delete_whose_reply_was_lost_as_deleted(
        zookeeper: ZooKeeperServer, zk_url: str, proxy: ReplyDropProxy, data_dir: Path, tmp_path: Path) -> None:
    """The real daemon (``run``) against the real ZooKeeper through the proxy: its one delete multi is
    applied and its reply dropped."""
    ids = range(1, 9)
    paths = _seed(zk_url, ids)
    via_proxy = ["--data-dir", str(data_dir), "--metadata-store", _via(proxy, zookeeper, zk_url)]
    r = run_cli("enqueue", "--from-file", str(request_file(tmp_path / "r.jsonl", ids)), *via_proxy)
    assert r.returncode == 0, r.stderr
    proxy.arm()
    r = run_cli("run", "--exit-when-idle", "--max-wait", "60", "--admin-address", f"127.0.0.1:{free_port()}",
                *via_proxy, timeout=120)
    assert r.returncode == 0, r.stderr
    assert proxy.dropped == 1, "no delete multi went through the proxy"
    with open_store(zk_url) as direct:
        assert [lid for lid, p in paths.items() if direct.get(p) is not None] == []
    r = run_cli("audit", "--json", "--data-dir", str(data_dir))
    assert r.returncode == 0, r.stderr
    records = json.loads(r.stdout)
    outcomes = {rec["request"]["ledgerId"]: rec["outcome"] for rec in records}
    assert outcomes == dict.fromkeys(ids, "deleted"), f"ledgers this daemon deleted audited as: {outcomes}"
    assert all("reply lost; gone on re-read" in rec["reason"] for rec in records), [r["reason"] for r in records]


def test_deleted_total_counts_a_delete_whose_reply_was_lost(
        zookeeper: ZooKeeperServer, zk_url: str, proxy: ReplyDropProxy, pulsar_broker: PulsarLiteBroker) -> None:
    """The same fault under the service the daemon runs, where its metrics can be read."""
    store = open_store(zk_url)
    bk_store = open_store(_via(proxy, zookeeper, f"{zk_url}-bk"))
    world = make_world(store, bk_store, pulsar_broker.service_url)
    try:
        for lid in range(1, 6):
            world.writer.bk_ledger(lid, pulsar_custom_metadata(TOPIC))
        world.start()
        proxy.arm()
        for lid in range(1, 6):
            world.service.send_pending_delete(request(TOPIC, lid))
        world.drain(lambda w: sum(w.outcomes().values()) >= 5, timeout_s=120)
        assert proxy.dropped == 1
        assert world.outcomes() == {"deleted": 5}, world.outcomes()
        assert world.service.metrics.value("pulsar_ledger_deletion_deleted_total", {"type": "LEDGER"}) == 5
    finally:
        world.service.close()
        world.service.broker.close()
        store.close()
        bk_store.close()
