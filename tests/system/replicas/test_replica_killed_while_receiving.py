"""On pulsar-lite, a replica SIGKILLed while the broker is sending
it messages leaves its requests with a consumer that no longer exists.

The README: "a replica that dies (SIGKILL, OOM, node loss) leaves its unacked requests to the others".
Real Pulsar redelivers them once the dead connection closes.  pulsar-lite (the tests' and demos' broker,
a binary we cannot change) does when the connection ends with a FIN; a process killed with data still
unread in its socket ends with a RST, and pulsar-lite then logs "Connection reset by peer" and never
removes that connection's consumers: what was dispatched to them waits, unacked, until the broker
restarts (it was seen about one run in three with a replica killed at ``retry.after-publish``; frozen
first, SIGSTOP, then killed, it happens every time).  Nothing is lost: the requests are stored, and a
restart of the pulsar-lite process hands them to the siblings.  That restart is the README's remedy
(an embedded daemon's ``run`` replaces its broker at start, so a restarted daemon meets it already).

Real processes: two ``run`` replicas (the second started once the first is dead), a pulsar-lite
process of this module's own (restarted on its ports), ZooKeeper (a chroot).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.harness import PulsarLiteBroker
from tests.support.replicas_world import ReplicaWorld


@pytest.fixture
def world(tmp_path: Path, zk_url: str, own_pulsar_lite: PulsarLiteBroker) -> Iterator[ReplicaWorld]:
    w = ReplicaWorld(tmp_path, zk_url, own_pulsar_lite.service_url, scope="cluster", partitions=1)
    yield w
    w.close()


def test_a_replica_frozen_then_killed_leaves_its_requests_to_its_sibling_once_pulsar_lite_restarts(
        world: ReplicaWorld, own_pulsar_lite: PulsarLiteBroker) -> None:
    """The replica freezes (SIGSTOP: a stalled node, a paused VM) while the broker pushes it requests,
    then is killed with them unread (the OOM killer, a node lost); the broker is restarted."""
    first, second = world.add_replicas(2)
    first.start().wait_ready()
    assert first.proc is not None
    first.proc.send_signal(signal.SIGSTOP)
    world.enqueue(world.orphans(300))  # dispatched to the only consumer: the frozen one
    first.stop(signal.SIGKILL)
    own_pulsar_lite.stop()  # the remedy the README names for pulsar-lite's consumers of dead connections
    own_pulsar_lite.start()
    second.start().wait_ready()
    try:
        world.wait_drained(60)
    except RuntimeError:
        pytest.fail(f"{len(world.left())} of {len(world.ledgers)} requests never reached the sibling of the "
                    "killed replica, even after the broker restarted")
    assert all(n == 1 for n in world.deletions().values())
