"""The delete process, driven from outside, with SIGSTOP: a child that is alive but runs nothing.

Real processes: ``ledger-deletion run`` on the session's ZooKeeper (a chroot per test) and pulsar-lite; the
judge reads ZooKeeper, the daemon's audit trail, ``/proc`` and ``/readyz``.
"""

from __future__ import annotations

import signal

from tests.support.delete_process_world import (
    HELD,
    DeleteProcessWorld,
    gate,
    gone,
    log,
    sigterm_seconds,
    started,
    state,
    stopped,
    world,
)
from tests.support.harness import wait_until

__all__ = ["world"]


def test_sigterm_with_the_delete_process_stopped_ends_the_daemon_in_time_and_leaves_no_child(
        world: DeleteProcessWorld) -> None:
    """An operator (or a debugger, or the OOM killer's freezer) stops the child holding a batch; then the
    pod is stopped.  SIGTERM must end the daemon within its 20 s bound, the child with it, and the batch's
    requests must come back to the next daemon (deleted once, none lost)."""
    [daemon] = world.add_replicas(1)
    held = gate(world)
    child = started(world, daemon, held.at())
    world.enqueue(world.orphans(20))
    wait_until(lambda: HELD in log(world, daemon), 30, "a batch in the child")
    with stopped(child):
        seconds, code = sigterm_seconds(daemon)
        child_left = not gone(child)
        child_state = state(child)
    assert seconds <= 20, (seconds, code, log(world, daemon)[-3000:])
    assert not child_left, (child_state, log(world, daemon)[-3000:])
    held.open()
    daemon.start().wait_ready()
    world.wait_drained(60)
    assert all(n == 1 for n in world.deletions().values()), world.deletions()


def test_sigkill_of_the_daemon_with_the_delete_process_stopped_leaves_no_child(world: DeleteProcessWorld) -> None:
    """The daemon dies (OOM, SIGKILL) while its child is stopped: the child must go with it, not linger
    stopped, holding its ZooKeeper connection and its batch, until something continues it."""
    [daemon] = world.add_replicas(1)
    child = started(world, daemon)
    with stopped(child):
        assert daemon.stop(signal.SIGKILL) == -signal.SIGKILL
        wait_until(lambda: gone(child), 10, "the stopped delete process gone with its daemon")


def test_a_stopped_child_continued_after_its_daemon_died_deletes_nothing(world: DeleteProcessWorld) -> None:
    """Stopped holding a verified batch, its daemon SIGKILLed, then continued: it must die without deleting
    (nobody would record or ack those deletes)."""
    [daemon] = world.add_replicas(1)
    held = gate(world)
    child = started(world, daemon, held.at())
    world.enqueue(world.orphans(20))
    wait_until(lambda: HELD in log(world, daemon), 30, "a batch in the child")
    with stopped(child):
        assert daemon.stop(signal.SIGKILL) == -signal.SIGKILL
        held.open()  # continued, nothing holds it back from its deletes but its daemon's death
    wait_until(lambda: gone(child), 10, "the continued delete process gone")
    assert sorted(world.left()) == world.ledgers
