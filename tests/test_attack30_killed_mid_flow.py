"""Attack (issue 30, helper X): on pulsar-lite, a replica SIGKILLed while the broker is sending it
messages leaves its requests stuck: never redelivered to its siblings, never deleted, never parked.

The README: "a replica that dies (SIGKILL, OOM, node loss) leaves its unacked requests to the others".
On pulsar-lite (the tests' and demos' broker, where replicas need ``consumer_ids.py`` to run at all)
that holds when the dead process's connection ends with a FIN.  A process killed with data still
unread in its socket ends with a RST, and pulsar-lite then logs "Connection reset by peer" and never
removes that connection's consumers: what was dispatched to them stays assigned to a consumer that no
longer exists (seen: the sibling settled nothing for a minute, and its log said so).  It happens
by itself about one run in three with a replica killed at ``retry.after-publish`` (the RETRY copies
just receipted are dispatched back to the dying replica), which is how it was found; frozen first
(SIGSTOP), then killed, it happens every time.  Nothing in the product notices or works around it,
and the embedded mode meets it too: a daemon SIGKILLed mid-flow and restarted reuses its running
broker, where its old consumers still hold its requests.

Real processes: two ``run`` replicas (the second started once the first is dead), a pulsar-lite
process of this module's own, ZooKeeper (a chroot).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import PulsarLiteBroker
from tests.replicas_world import Replica, ReplicaWorld


@pytest.fixture
def lite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PulsarLiteBroker]:
    broker = PulsarLiteBroker(tmp_path_factory.mktemp("attack30-flow-broker")).start()
    yield broker
    broker.stop()


@pytest.fixture
def world(tmp_path: Path, zk_url: str, lite: PulsarLiteBroker) -> Iterator[ReplicaWorld]:
    w = ReplicaWorld(tmp_path, zk_url, lite.service_url, scope="cluster", partitions=1)
    yield w
    w.close()


def test_a_replica_frozen_then_killed_leaves_its_requests_to_its_sibling(
        world: ReplicaWorld, lite: PulsarLiteBroker) -> None:
    """The same, every time: the replica freezes (SIGSTOP: a stalled node, a paused VM) while the broker
    pushes it requests, then is killed with them unread (the OOM killer, a node lost)."""
    first, second = world.add_replicas(2)
    first.start().wait_ready()
    assert first.proc is not None
    first.proc.send_signal(signal.SIGSTOP)
    world.enqueue(world.orphans(300))  # dispatched to the only consumer: the frozen one
    first.stop(signal.SIGKILL)
    _sibling_drains(world, second, lite)


def _sibling_drains(world: ReplicaWorld, sibling: Replica, lite: PulsarLiteBroker) -> None:
    reset = "Connection reset by peer" in lite.log_tail(400)
    sibling.start().wait_ready()
    try:
        world.wait_drained(45)
    except RuntimeError:
        pytest.fail(f"{len(world.left())} of {len(world.ledgers)} requests never reached the sibling of the "
                    f"killed replica (the broker saw a connection reset: {reset})")
    assert all(n == 1 for n in world.deletions().values())
