"""The leak watcher as the daemon runs it: two ``run`` replicas on real ZooKeeper and a pulsar-lite
process, and a stand-in for a stock broker that deletes in one phase (metadata first, then storage,
and the storage delete of some ledgers fails).

Exactly one replica watches and ``status`` says which; a leak is requested and deleted by the
daemons, a ledger the broker deleted itself gets no request, and live ledgers none.  The watching
replica is then SIGKILLed and a ledger leaks during the hand-over: the other replica takes the role
within the ZooKeeper session timeout and catches that leak too.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deletion_service.cluster_writer import pulsar_custom_metadata
from metastore.formats import ledger_path
from tests.support.harness import PulsarLiteBroker, wait_until
from tests.support.metrics_scrape import metric
from tests.support.replica_tools import metrics
from tests.support.replicas_world import Replica, ReplicaWorld

LIVE = [4, 5, 6]


@pytest.fixture
def world(tmp_path: Path, zk_url: str, module_pulsar_lite: PulsarLiteBroker) -> Iterator[ReplicaWorld]:
    w = ReplicaWorld(tmp_path, zk_url, module_pulsar_lite.service_url)
    with w.config.open("a") as config:  # a settle delay and passes a test can wait for
        config.write("ledgerDeletionLeakWatcherSettleSeconds = 2\nledgerDeletionLeakWatcherPassSeconds = 1\n")
    yield w
    w.close()


def _status(replica: Replica) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{replica.port}/status", timeout=5) as r:
        return json.loads(r.read())["leakWatcher"]


def _watching(world: ReplicaWorld) -> list[Replica]:
    return [r for r in world.replicas if r.running() and _status(r).get("watching") and _status(r).get("lastPass")]


def _stored(world: ReplicaWorld, ledger_id: int) -> bool:
    return world.store.get(ledger_path(world.writer.root, ledger_id, world.writer.layout)) is not None


def _broker_deletes(world: ReplicaWorld, keep: list[int], deleted_from_storage: list[int]) -> None:
    """What a stock broker does: the list first, then storage, where only some deletes succeed."""
    world.writer.managed_ledger(world.topic, keep)
    for ledger_id in deleted_from_storage:
        path = ledger_path(world.writer.root, ledger_id, world.writer.layout)
        node = world.store.get(path)
        assert node is not None
        world.store.delete(path, node.version)


def _requested(world: ReplicaWorld) -> set[int]:
    """Every ledger any replica's audit trail holds a record for (a request that reached the delete phase)."""
    return {r["request"]["ledgerId"] for rep in world.replicas for r in rep.audit()}


def test_one_replica_watches_and_a_leak_made_while_the_watcher_dies_is_still_caught(world: ReplicaWorld) -> None:
    ids = [1, 2, 3, *LIVE]
    for lid in ids:
        world.writer.bk_ledger(lid, pulsar_custom_metadata(world.topic))
    world.writer.managed_ledger(world.topic, ids)
    for replica in world.add_replicas(2):
        replica.start()
    for replica in world.replicas:
        replica.wait_ready()
    wait_until(lambda: len(_watching(world)) == 1, 30, "one replica watching, its first pass done")
    leader = _watching(world)[0]
    other = next(r for r in world.replicas if r is not leader)
    said = _status(other)
    assert (said["watching"], said["watcher"]) == (False, _status(leader)["watcher"])  # both name the leader

    _broker_deletes(world, keep=[3, *LIVE], deleted_from_storage=[1])  # 2's storage delete "failed"
    wait_until(lambda: not _stored(world, 2), 60, "the leaked ledger 2 deleted by the daemons")
    tenant, namespace = world.topic.partition("://")[2].split("/")[:2]
    scraped = metrics(leader)
    assert metric(scraped, f'pulsar_ledger_deletion_leaks_observed_total{{kind="ledger",tenant="{tenant}",'
                           f'namespace="{namespace}"}}') == 1
    assert metric(scraped, "pulsar_ledger_deletion_leak_watcher_leader") == 1
    assert metric(metrics(other), "pulsar_ledger_deletion_leak_watcher_leader") == 0

    leader.stop(signal.SIGKILL)
    _broker_deletes(world, keep=LIVE, deleted_from_storage=[])  # 3 leaks while nobody watches
    wait_until(lambda: _status(other).get("watching") and _status(other).get("lastPass"), 30,
               "the other replica watches")
    wait_until(lambda: not _stored(world, 3), 60, "the leak made during the hand-over deleted")

    assert [lid for lid in LIVE if _stored(world, lid)] == LIVE  # live ledgers untouched
    assert 1 not in _requested(world)  # the broker deleted 1 itself: no request
    shown = subprocess.run([sys.executable, "-m", "deletion_service.cli.main", "status", "--admin-address",
                            f"127.0.0.1:{other.port}"], capture_output=True, text=True, timeout=60, env=world.env())
    assert shown.returncode == 0, shown.stderr
    assert "leak watcher: this daemon watches" in " ".join(shown.stdout.split())
