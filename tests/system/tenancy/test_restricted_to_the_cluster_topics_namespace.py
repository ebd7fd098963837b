"""A replica restricted to one namespace acts for that namespace only, even on the cluster-wide topic.

Namespace scope gives each namespace ``persistent://<tenant>/<ns>/__ledger_deletion``.  The
cluster-wide topic's default name, ``persistent://pulsar/system/__ledger_deletion``, *is* that
name for the namespace ``pulsar/system`` (every Pulsar cluster has it).  So a replica started
``run --namespace pulsar/system`` (or ``--tenant pulsar``) consumes the cluster-wide topic, where
a guard that trusted the topic ("cluster topics: any namespace") would let it delete another
tenant's ledger sent there — though the README says restricted daemons never read the cluster
topics, and the same replica's admin API, restricted the same way, refuses that very ledger.
A restricted daemon acts only for its own namespaces whichever topic it read a request from:
the other tenant's request is parked in the DLQ (cross-namespace), its own is deleted.

Real processes: the daemon replica, pulsar-lite (the session's), ZooKeeper (a chroot).  The
cluster topic lives in a tenant of this test's own (``p<tag>/system``), so tests sharing the
broker never meet; the name collision is exactly the default's.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.harness import PulsarLiteBroker, wait_until
from tests.support.replica_tools import exists, orphan, request, send_raw, start_with
from tests.support.replicas_world import ReplicaWorld


def _system(world: ReplicaWorld) -> str:
    """This test's ``pulsar/system``: the namespace of its cluster-wide topic."""
    return f"p{world.tag}/system"


@pytest.fixture
def world(tmp_path: Path, zk_url: str, pulsar_broker: PulsarLiteBroker) -> Iterator[ReplicaWorld]:
    w = ReplicaWorld(tmp_path, zk_url, pulsar_broker.service_url, scope="namespace")
    w.config.write_text(w.config.read_text().replace(
        f"persistent://pulsar/system/__ld_{w.tag}", f"persistent://{_system(w)}/__ledger_deletion"))
    yield w
    w.close()


@pytest.mark.parametrize("restriction", ["--namespace", "--tenant"])
def test_a_replica_restricted_to_the_cluster_topics_namespace_deletes_no_other_tenants_ledger(
        world: ReplicaWorld, restriction: str) -> None:
    system = _system(world)
    world.writer.managed_ledger(f"persistent://{system}/mine", [])  # the namespace, as Pulsar has it
    [replica] = world.add_replicas(1)
    start_with(replica, restriction, system if restriction == "--namespace" else system.split("/")[0])
    replica.wait_ready()
    victim = orphan(world, 20_000, world.topic)  # tenant r<tag>: not this replica's
    own = orphan(world, 20_002, f"persistent://{system}/mine")  # its own namespace's: the sentinel

    # Its own admin API, restricted the same way, refuses the victim: the scope is meant to hold.
    body = json.dumps({"topicName": world.topic, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER",
                       "ledgerId": victim}).encode()
    post = urllib.request.Request(f"http://127.0.0.1:{replica.port}/admin/v2/ledger-deletion/delete", body,
                                  {"Content-Type": "application/json"}, method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(post, timeout=30)
    assert refused.value.code != 200 and exists(world, victim)

    # Another tenant's request on the cluster-wide topic (sent there before a switch of scope, or by
    # whoever may produce to pulsar/system), then the sentinel, on the same partition, after it.
    partition = f"persistent://{system}/__ledger_deletion-partition-{victim % world.partitions}"
    send_raw(world.broker_url, partition, request(world.topic, victim))
    send_raw(world.broker_url, partition, request(f"persistent://{system}/mine", own))
    wait_until(lambda: not exists(world, own), 60, "the sentinel of the replica's own namespace deleted",
               interval=0.3)
    assert exists(world, victim), (
        f"a replica restricted by {restriction} to {system} deleted ledger {victim} of {world.topic}: "
        "it consumes the cluster-wide topic, whose name is its namespace's own")
