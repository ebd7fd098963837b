"""The delete process's audit trail: the daemon SIGKILLed at random moments of a drain, with
small batches, and (stopped or not) while its delete process works.  After every kill, each ledger gone
from ZooKeeper must be recorded ``deleted`` in the daemon's trail, but for at most one batch.

Real processes: ``ledger-deletion run`` on the session's ZooKeeper (a chroot per test) and this module's
pulsar-lite; the judge reads ZooKeeper and the daemon's audit trail files only.
"""

from __future__ import annotations

import random
import signal
import time

import pytest

from tests.support.audited_drain import batches, restarted, unrecorded
from tests.support.delete_process_world import DeleteProcessWorld, log, stopped, world
from tests.support.harness import wait_until
from tests.support.replicas_world import Replica

__all__ = ["world"]


def _kill_at(daemon: Replica, world: DeleteProcessWorld, delay: float) -> None:
    """SIGKILL the daemon ``delay`` s after its first deletion (a random moment of its drain)."""
    wait_until(lambda: len(world.left()) < len(world.ledgers) or not daemon.running(), 60, "a first deletion")
    time.sleep(delay)  # the random moment is the test: nothing to wait for
    assert daemon.stop(signal.SIGKILL) in (-signal.SIGKILL, None)


@pytest.mark.slow
@pytest.mark.parametrize("size", [1, 10])
def test_random_kills_mid_drain_leave_at_most_one_batch_unrecorded(world: DeleteProcessWorld, size: int) -> None:
    batches(world, size)
    [daemon] = world.add_replicas(1)
    world.enqueue(world.orphans(400))
    rng = random.Random(size)
    before: set[int] = set()
    for _ in range(3):
        restarted(world, daemon)
        _kill_at(daemon, world, rng.uniform(0.0, 0.6))
        now = unrecorded(world)
        assert len(now - before) <= size, (sorted(now - before), log(world, daemon)[-2000:])
        before = now
    restarted(world, daemon)
    world.wait_drained(90)
    deleted = world.deletions()
    assert not {lid: n for lid, n in deleted.items() if n > 1}


def test_a_daemon_stopped_while_its_child_works_then_killed_leaves_one_batch_unrecorded(
        world: DeleteProcessWorld) -> None:
    """The slow audit: the daemon (not its child) is stopped mid-drain, so nothing is recorded while the
    child runs on; SIGKILLed while stopped, it must leave at most the one batch in hand unrecorded."""
    batches(world, 10)
    [daemon] = world.add_replicas(1)
    world.enqueue(world.orphans(300))
    restarted(world, daemon)
    wait_until(lambda: len(world.left()) < len(world.ledgers) - 20, 60, "the drain under way")
    assert daemon.proc is not None
    with stopped(daemon.proc.pid):
        time.sleep(1.5)  # what must not happen (the child deleting on) would happen now: no event says it did not
        assert len(unrecorded(world)) <= 10, sorted(unrecorded(world))
        assert daemon.stop(signal.SIGKILL) == -signal.SIGKILL
    assert len(unrecorded(world)) <= 10, sorted(unrecorded(world))
