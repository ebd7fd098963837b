"""A replica SIGKILLed at the
worst step of a dead-letter and of a delete, with a sibling taking over its requests.

Each request must end exactly once as deleted (the other replica's repeats: ``absent``), and each
invalid one must be parked in the DLQ with its reason (a copy published twice is allowed: the design
takes a duplicate over a loss).  The requests without ``markedAt`` make the first replica dead-letter;
the young ledgers (``minLedgerAgeSeconds`` 3) make it reconsume before it deletes.

Real processes: two ``run`` replicas, a pulsar-lite of the test's own, ZooKeeper (a chroot), the
``dlq list`` CLI.  When the killed replica's connection ended with a reset (data unread in its
socket), pulsar-lite keeps that replica's consumers and what they held until it restarts (a limitation
of the binary, ``test_replica_killed_while_receiving.py``); the README's remedy, a broker restart, is applied
then.  With the delete process the first dead letter is published before the batch's BookKeeper
verdicts come back, so the kill comes sooner, often with the orphans' messages still arriving.
"""

from __future__ import annotations

import base64
import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.harness import PulsarLiteBroker
from tests.support.replica_tools import send_raw
from tests.support.replicas_world import ReplicaWorld

INVALID = [70_000, 70_001, 70_002]


@pytest.fixture
def world(tmp_path: Path, zk_url: str, own_pulsar_lite: PulsarLiteBroker) -> Iterator[ReplicaWorld]:
    w = ReplicaWorld(tmp_path, zk_url, own_pulsar_lite.service_url, scope="namespace")
    w.config.write_text(w.config.read_text().replace("minLedgerAgeSeconds = 0", "minLedgerAgeSeconds = 3"))
    yield w
    w.close()


def _parked(world: ReplicaWorld) -> list[dict]:
    out = subprocess.run([*world.argv(world.root / "cli-data"), "--json", "dlq", "list"], env=world.env(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


# Not ``retry.after-publish``: killed there, the replica dies as its RETRY copies are dispatched back to
# it, and about one run in three pulsar-lite then strands its requests (test_replica_killed_while_receiving).
@pytest.mark.parametrize("point", ["dlq.after-publish", "delete.before-storage"])
def test_a_replica_killed_mid_step_loses_nothing_and_deletes_nothing_twice(world: ReplicaWorld, point: str,
                                                                           own_pulsar_lite: PulsarLiteBroker) -> None:
    first, second = world.add_replicas(2)
    first.start(f"{point}=kill").wait_ready()
    ns_topic = "persistent://" + world.topic.removeprefix("persistent://").rsplit("/", 1)[0] + "/__ledger_deletion"
    invalid = [json.dumps({"topicName": world.topic, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER",
                           "ledgerId": lid, "reason": "orphan"}).encode() for lid in INVALID]  # no markedAt
    for payload in invalid:
        send_raw(world.broker_url, ns_topic, payload)
    world.enqueue(world.orphans(30))
    assert first.proc is not None and first.proc.wait(60) == -signal.SIGKILL
    second.start().wait_ready()
    try:
        world.wait_drained(30)
    except RuntimeError:
        assert "Connection reset by peer" in own_pulsar_lite.log_tail(2000), "not drained, and no reset to explain it"
        own_pulsar_lite.stop()
        own_pulsar_lite.start()
        world.wait_drained(90)

    deleted = world.deletions()
    assert set(deleted) == set(world.ledgers)
    assert all(n == 1 for n in deleted.values()), {k: n for k, n in deleted.items() if n != 1}
    entries = _parked(world)
    parked = {json.loads(base64.b64decode(e["payloadBase64"]))["ledgerId"] for e in entries if e.get("payloadBase64")}
    assert set(INVALID) <= parked, f"invalid requests lost (neither settled nor parked): {set(INVALID) - parked}"
    assert second.stop() == 0
