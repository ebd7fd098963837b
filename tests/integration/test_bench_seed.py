"""The bench's fast seeding writes what the product reads, and the ZooKeeper-limit loops really delete.

Seeded nodes are read back through the product's own store and decoders, so a
bench figure is never taken on metadata the daemon would not recognise.  The
loops' timings are not checked (tests never time anything): only that every
znode they claim to have deleted is gone.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient

from bench.seed import seed_ledgers, seed_managed_ledgers
from bench.zk_limits import Rate, one_phase_baseline, raw_multi_delete, raw_pipelined_get_delete, spread
from metastore import open_store
from metastore.formats import (
    LedgerLayout,
    decode_ledger_metadata,
    decode_managed_ledger,
    ledger_path,
    managed_ledger_name,
    managed_ledger_path,
    read_layout,
)
from metastore.formats.custom_metadata import MANAGED_LEDGER_KEY
from tests.support.harness import ZooKeeperServer

LEDGERS = 50
TOPICS = 5
LIMIT_N = 200


@pytest.fixture
def raw(zookeeper: ZooKeeperServer) -> Iterator[KazooClient]:
    """A plain kazoo client on the server's root, to look at znodes as ZooKeeper sees them."""
    client = KazooClient(hosts=zookeeper.hosts)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


def test_seeded_nodes_decode_as_the_product_reads_them(zookeeper: ZooKeeperServer) -> None:
    chroot = f"/seed-{uuid.uuid4().hex[:8]}"
    by_topic = spread(LEDGERS, TOPICS)
    topic_of = {lid: topic for topic, ids in by_topic.items() for lid in ids}
    paths = seed_ledgers(zookeeper.hosts, chroot, range(1, LEDGERS + 1), topic_of.__getitem__)
    seed_managed_ledgers(zookeeper.hosts, chroot, list(by_topic), by_topic.__getitem__)

    assert len(by_topic) == TOPICS
    assert paths == [ledger_path("/ledgers", lid, LedgerLayout.HIERARCHICAL) for lid in range(1, LEDGERS + 1)]
    with open_store(f"{zookeeper.url}{chroot}") as store:
        assert read_layout(store, "/ledgers") is LedgerLayout.HIERARCHICAL
        for lid, path in zip(range(1, LEDGERS + 1), paths, strict=True):
            node = store.get(path)
            assert node is not None, path
            meta = decode_ledger_metadata(node.data)
            assert meta.state == "CLOSED"
            assert meta.custom_text(MANAGED_LEDGER_KEY) == managed_ledger_name(topic_of[lid])
        for topic, ids in by_topic.items():
            node = store.get(managed_ledger_path(topic))
            assert node is not None, topic
            assert decode_managed_ledger(node.data).ledger_ids() == ids


@pytest.mark.parametrize(
    "loop",
    [raw_pipelined_get_delete, raw_multi_delete, one_phase_baseline],
    ids=["pipelined-get-delete", "multi-delete", "one-phase"],
)
def test_limit_loops_delete_every_seeded_znode(
    zookeeper: ZooKeeperServer, raw: KazooClient, loop: Callable[..., Rate]
) -> None:
    chroot = f"/limit-{uuid.uuid4().hex[:8]}"
    rate = loop(zookeeper.hosts, LIMIT_N, chroot=chroot)

    assert rate.ledgers == LIMIT_N
    assert rate.seconds > 0
    assert raw.exists(f"{chroot}/ledgers/LAYOUT") is not None  # it was seeded there ...
    left = [lid for lid in range(1, LIMIT_N + 1)
            if raw.exists(chroot + ledger_path("/ledgers", lid, LedgerLayout.HIERARCHICAL)) is not None]
    assert left == []  # ... and every ledger is gone


def test_one_phase_empties_every_managed_ledger(zookeeper: ZooKeeperServer, raw: KazooClient) -> None:
    chroot = f"/limit-{uuid.uuid4().hex[:8]}"
    one_phase_baseline(zookeeper.hosts, LIMIT_N, topics=4, chroot=chroot)

    for topic in spread(LIMIT_N, 4):
        data, stat = raw.get(chroot + managed_ledger_path(topic))
        assert decode_managed_ledger(data).ledgers == []
        assert stat.version == 1  # one CAS write per topic
