"""In namespace scope, a request for a namespace the metadata store no longer has goes to the
cluster's topics, where unrestricted replicas read it (on its namespace's own topic nobody would).

Replicas find the namespaces to serve in ``/admin/policies`` and ``/managed-ledgers``.  A deleted
namespace is in neither, but its leaked ledgers are in BookKeeper (#21745, #22802: the leaks
``scan-orphans --enqueue`` exists for), and ``enqueue``/``scan-orphans --enqueue`` send each
request to its topic's namespace's own topic, creating it and its subscription.  No replica ever
subscribes there, so the request would wait for good where nobody looks.  A request for a namespace
the cluster does not have goes to the cluster's topics, which unrestricted daemons drain.

Real processes: two unrestricted replicas, pulsar-lite (the session's), ZooKeeper (a chroot), the
real ``enqueue --from-file`` CLI.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.harness import PulsarLiteBroker, wait_until
from tests.support.replica_tools import enqueue_lines, exists, orphan, settled
from tests.support.replicas_world import ReplicaWorld


@pytest.fixture
def world(tmp_path: Path, zk_url: str, pulsar_broker: PulsarLiteBroker) -> Iterator[ReplicaWorld]:
    w = ReplicaWorld(tmp_path, zk_url, pulsar_broker.service_url, scope="namespace")
    w.config.write_text(w.config.read_text() + "ledgerDeletionNamespaceRefreshSeconds = 1\n")
    yield w
    w.close()


def test_an_orphan_of_a_deleted_namespace_is_settled_not_left_unread(world: ReplicaWorld) -> None:
    for replica in world.add_replicas(2):
        replica.start()
    for replica in world.replicas:
        replica.wait_ready()
    gone = f"persistent://gone{world.tag}/ns/old-topic"  # its namespace: in no /admin/policies, no /managed-ledgers
    victim = orphan(world, 30_000, gone)
    [sentinel] = world.orphans(1)
    enqueue_lines(world, [(gone, victim), (world.topic, sentinel)])
    wait_until(lambda: not exists(world, sentinel), 60, "the sentinel deleted", interval=0.3)

    def accounted() -> bool:  # deleted, or settled any way an operator can see (audit, DLQ)
        return not exists(world, victim) or bool(settled(world, victim))

    try:  # the replicas look for namespaces every second here: many looks, and none finds it
        wait_until(accounted, 20, f"the request for ledger {victim} of {gone} settled by a replica", interval=0.5)
    except RuntimeError as e:
        pytest.fail(f"lost: the request for orphan {victim} of a deleted namespace sits on "
                    f"persistent://gone{world.tag}/ns/__ledger_deletion, which no replica reads ({e})")
