"""The delete process, driven from outside, through the broker: it is restarted while the child holds a
batch, so the batch's acks and copies go to a broker that forgot the daemon's consumers.

Real processes: ``ledger-deletion run`` on the session's ZooKeeper (a chroot per test) and a pulsar-lite of
the test's own (``own_pulsar_lite``: it is killed and restarted).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.delete_process_world import (
    HELD,
    DeleteProcessWorld,
    delete_process,
    gate,
    log,
    started,
    wait_acked,
)
from tests.support.harness import PulsarLiteBroker, wait_until


@pytest.fixture
def world(tmp_path: Path, zk_url: str, own_pulsar_lite: PulsarLiteBroker) -> Iterator[DeleteProcessWorld]:
    w = DeleteProcessWorld(tmp_path, zk_url, own_pulsar_lite.service_url)
    yield w
    w.close()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_broker_restarted_while_the_child_holds_a_batch_loses_and_repeats_nothing(
        world: DeleteProcessWorld, own_pulsar_lite: PulsarLiteBroker, sig: int) -> None:
    [daemon] = world.add_replicas(1)
    held = gate(world)
    started(world, daemon, held.at())
    world.enqueue(world.orphans(40))
    wait_until(lambda: HELD in log(world, daemon), 30, "a batch in the child")
    own_pulsar_lite.stop(sig)
    own_pulsar_lite.start()
    held.open()
    world.wait_drained(60)
    deleted = world.deletions()
    assert set(deleted) == set(world.ledgers)
    assert all(n == 1 for n in deleted.values()), {k: n for k, n in deleted.items() if n > 1}
    wait_acked(world, own_pulsar_lite)
    assert daemon.running() and delete_process(daemon) is not None
