"""A broker restart redelivers a held request: one process holds it once.

A RETRY message not yet due is held in a replica's memory, unacked (pulsar-lite ignores delayed
delivery).  When the broker restarts, every consumer reconnects and the broker redelivers every
unacked message — the held one included — to any consumer of the subscription.  Nothing in the
intake that did not recognise a redelivered message it (or a sibling) already holds would hold it
again.  Then ``held{reason}`` summed over the replicas (the dashboard's panel) would count one request
twice, and when it falls due both holders would decide it (with a 25 s minimum age: ``deleted`` by one
replica, ``absent`` by the other, for one request; a request that is reconsumed again would become two
RETRY copies, and each later restart could double them).  The redelivery goes either to the holder
itself (held 2 by one replica) or to its sibling (1 + 1).

Within one process: a redelivered message it already holds is left to the held one (which acks it
when due).  Held by two replicas (the redelivery went to the sibling), it is counted by both until it
falls due; the README says so.  It takes a broker that restarts *and* holds delayed messages in the
consumers' memory (pulsar-lite has no delayed delivery); a shared registry of holds would close it.

Real processes: two ``run`` replicas, a pulsar-lite process of this module's own (restarted here),
ZooKeeper (a chroot).

The broker restarts only once it has the request's own acknowledgement (its RETRY copy unacked, the
request acked, in one metrics snapshot): the client sends acks grouped, ~100 ms late, and a request
whose ack the restart loses comes back as a request and may be decided again by the sibling (at least
once, as Pulsar delivers) — a second RETRY copy, another hold, and not what this test is about.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.delete_process_world import backlog_by_topic
from tests.support.harness import PulsarLiteBroker, wait_until
from tests.support.replica_tools import gauge, metrics
from tests.support.replicas_world import ReplicaWorld


@pytest.fixture
def world(tmp_path: Path, zk_url: str, own_pulsar_lite: PulsarLiteBroker) -> Iterator[ReplicaWorld]:
    w = ReplicaWorld(tmp_path, zk_url, own_pulsar_lite.service_url, scope="cluster")
    w.config.write_text(w.config.read_text().replace("minLedgerAgeSeconds = 0", "minLedgerAgeSeconds = 3600"))
    yield w
    w.close()


def _sum(world: ReplicaWorld, name: str) -> float:
    total = 0.0
    for replica in world.replicas:
        with contextlib.suppress(OSError):  # a replica busy reconnecting: counted at the next look
            total += gauge(metrics(replica), name)
    return total


def _request_acked_retry_copy_unacked(world: ReplicaWorld, broker: PulsarLiteBroker) -> bool:
    """One snapshot of the broker's metrics shows the RETRY copy unacked and the request partitions
    empty: taken after the copy was published, so after the request was (the copy is made from it)."""
    counts = backlog_by_topic(world, broker)
    retry = sum(n for t, n in counts.items() if t.endswith("-RETRY"))
    return retry == 1 and sum(counts.values()) == retry


def test_a_held_request_is_held_once_after_a_broker_restart(world: ReplicaWorld,
                                                             own_pulsar_lite: PulsarLiteBroker) -> None:
    for replica in world.add_replicas(2):
        replica.start()
    for replica in world.replicas:
        replica.wait_ready()
    world.enqueue(world.orphans(1))  # created now: younger than minLedgerAgeSeconds, held for an hour
    wait_until(lambda: _sum(world, "pulsar_ledger_deletion_held") == 1, 60, "the young ledger's request held",
               interval=0.3)
    wait_until(lambda: _request_acked_retry_copy_unacked(world, own_pulsar_lite), 60,
               "the broker has the request's ack and its RETRY copy unacked", interval=0.5)
    received = _sum(world, "pulsar_ledger_deletion_received_total")

    own_pulsar_lite.stop()
    own_pulsar_lite.start()
    wait_until(lambda: _sum(world, "pulsar_ledger_deletion_received_total") > received, 90,
               "the replicas reconnected and the held message redelivered", interval=0.3)
    for replica in world.replicas:
        replica.wait_ready()
    held = {r.name: gauge(metrics(r), "pulsar_ledger_deletion_held") for r in world.replicas}
    assert all(n <= 1 for n in held.values()), f"one request, held twice by one replica after a broker restart: {held}"
    # Redelivered to the sibling instead, it is held by both until it falls due (nothing tells a process
    # what another holds): then one deletes it at its verified version and the other finds it absent.
    assert sum(held.values()) <= 2, held
