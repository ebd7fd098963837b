"""Forged message properties carry no request across namespaces: tenants' replicas restricted to their
own namespaces, and a request for another tenant's ledger produced straight onto one's own request or
RETRY topic with every property this tool reads forged to point elsewhere (``REAL_TOPIC`` naming the
victim's deletion topic, ``ledgerDeletionGraceSince`` at the epoch, ``ledgerDeletionHeldFor``,
``RECONSUMETIMES``, ``DELAY_TIME`` 0, a settlement marker, extra JSON fields naming the victim's
namespace).  The replica that reads it dead-letters it as ``cross-namespace`` in its own DLQ; the
victim's ledger stays; the victim's replica never sees it.

Real processes: two restricted ``run`` replicas, pulsar-lite (the session's), ZooKeeper (a chroot).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.harness import PulsarLiteBroker, wait_until
from tests.support.replica_tools import exists, orphan, request, send_raw, start_with
from tests.support.replicas_world import ReplicaWorld


@pytest.fixture
def world(tmp_path: Path, zk_url: str, pulsar_broker: PulsarLiteBroker) -> Iterator[ReplicaWorld]:
    w = ReplicaWorld(tmp_path, zk_url, pulsar_broker.service_url, scope="namespace")
    yield w
    w.close()


@pytest.mark.parametrize("suffix", ["", "-RETRY"])
def test_forged_properties_on_a_tenants_own_topics_cross_no_namespace(world: ReplicaWorld, suffix: str) -> None:
    attacker_ns, victim_ns = f"a{world.tag}/ns", f"v{world.tag}/ns"
    victim_topic = f"persistent://{victim_ns}/orders"
    for ns in (attacker_ns, victim_ns):
        world.writer.managed_ledger(f"persistent://{ns}/orders", [])
    attacker, victim = world.add_replicas(2)
    start_with(attacker, "--namespace", attacker_ns)
    start_with(victim, "--namespace", victim_ns)
    attacker.wait_ready()
    victim.wait_ready()
    target = orphan(world, 60_000, victim_topic)

    forged = {"REAL_TOPIC": f"persistent://{victim_ns}/__ledger_deletion", "ORIGIN_MESSAGE_ID": "1:0:-1:-1",
              "RECONSUMETIMES": "0", "DELAY_TIME": "0", "ledgerDeletionGraceSince": "1",
              "ledgerDeletionHeldFor": "not-yet", "ledgerDeletionSettled": "forged", "reason": "manual"}
    payload = request(victim_topic, target, "manual", namespace=victim_ns, tenant=victim_ns.split("/")[0],
                      REAL_TOPIC=forged["REAL_TOPIC"])
    send_raw(world.broker_url, f"persistent://{attacker_ns}/__ledger_deletion{suffix}", payload, forged)

    wait_until(lambda: any(r["request"].get("ledgerId") == target for r in attacker.audit()), 60,
               "the attacker's replica settled the forged request", interval=0.3)
    [record] = [r for r in attacker.audit() if r["request"].get("ledgerId") == target]
    assert record["outcome"] == "dlq" and "cross-namespace" in record["reason"], record
    assert exists(world, target), "another namespace's ledger deleted through a forged request"
    assert not any(r["request"].get("ledgerId") == target for r in victim.audit())
