"""A replica SIGTERMed again and again
while the broker is pushing it requests (a rolling restart under load), and once during its own start
(the consumer-id burn on pulsar-lite).  A graceful stop closes its consumers, so pulsar-lite hands what
it held to the sibling: nothing is stranded, nothing deleted twice.

Real processes: two ``run`` replicas, a pulsar-lite process of this module's own, ZooKeeper (a chroot).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.harness import PulsarLiteBroker, wait_until
from tests.support.replicas_world import ReplicaWorld


@pytest.fixture
def world(tmp_path: Path, zk_url: str, own_pulsar_lite: PulsarLiteBroker) -> Iterator[ReplicaWorld]:
    w = ReplicaWorld(tmp_path, zk_url, own_pulsar_lite.service_url, scope="cluster", partitions=1)
    yield w
    w.close()


def test_sigterm_under_load_and_during_start_strands_nothing(world: ReplicaWorld) -> None:
    restarted, steady = world.add_replicas(2)
    steady.start().wait_ready()
    restarted.start().wait_ready()
    for _ in range(3):
        before = len(restarted.audit())
        world.enqueue(world.orphans(600))
        wait_until(lambda: len(restarted.audit()) > before or not world.left(), 60,  # noqa: B023 - read at once
                   "the restarted replica settling", interval=0.1)
        assert restarted.stop(signal.SIGTERM) == 0
        restarted.start().wait_ready()
    restarted.stop(signal.SIGTERM)
    restarted.start()  # and SIGTERMed while it starts: taking its ticket, burning ids, subscribing
    assert restarted.stop(signal.SIGTERM) in (0, -signal.SIGTERM)
    world.wait_drained(90)
    deleted = world.deletions()
    assert set(deleted) == set(world.ledgers) and all(n == 1 for n in deleted.values())
