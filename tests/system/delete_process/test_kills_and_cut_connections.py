"""The delete process, driven from outside, with signals and network faults aimed at the child or the
daemon at chosen moments: while the child starts, while it holds a batch, over and over.

Real processes: ``ledger-deletion run`` on the session's ZooKeeper (a chroot per test) and pulsar-lite; the
judge reads ZooKeeper, the audit trail and ``/proc``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from tests.support.delete_process_world import (
    HELD,
    STARTED,
    DeleteProcessWorld,
    all_children,
    children_of,
    cut_zookeeper,
    delete_process,
    gate,
    gone,
    log,
    next_child,
    readyz_text,
    received,
    sigterm_seconds,
    started,
    stopped,
    wait_acked,
    wait_sessions_expired,
    world,
    zookeeper_port,
)
from tests.support.harness import PulsarLiteBroker, wait_until
from tests.support.replicas_world import Replica

__all__ = ["world"]

def _deleted_once(world: DeleteProcessWorld, timeout: float = 60) -> None:
    world.wait_drained(timeout)
    deleted = world.deletions()
    assert set(deleted) == set(world.ledgers), sorted(set(world.ledgers) - set(deleted))[:10]
    assert all(n == 1 for n in deleted.values()), {k: n for k, n in deleted.items() if n > 1}


def test_sigkill_of_the_daemon_while_the_child_holds_a_batch_ends_the_child_before_it_deletes(
        world: DeleteProcessWorld) -> None:
    """The daemon dies (OOM, node loss) while its child holds a verified batch: the child must not go on
    deleting for a daemon that can no longer record or ack (nobody's audit trail would say who deleted)."""
    [daemon] = world.add_replicas(1)
    held = gate(world)
    child = started(world, daemon, held.at())
    world.enqueue(world.orphans(20))
    wait_until(lambda: HELD in log(world, daemon), 30, "a batch in the child")
    assert daemon.stop(signal.SIGKILL) == -signal.SIGKILL
    held.open()  # the child, were it still there, would delete now
    wait_until(lambda: gone(child), 10, "the delete process gone with its daemon")
    assert sorted(world.left()) == world.ledgers, "the orphaned child deleted after its daemon died"


def test_sigterm_while_the_child_is_starting_ends_both_in_time(world: DeleteProcessWorld) -> None:
    [daemon] = world.add_replicas(1)
    daemon.start()
    wait_until(lambda: delete_process(daemon) is not None, 60, "the delete process spawned", daemon.proc)
    child = delete_process(daemon)
    assert child is not None
    world.children_seen.add(child)
    seconds, code = sigterm_seconds(daemon)
    assert seconds <= 20 and code == 0, (seconds, code, log(world, daemon)[-2000:])
    wait_until(lambda: gone(child), 10, "the delete process gone")


@pytest.mark.slow
def test_a_child_killed_each_time_it_starts_costs_nothing_but_time(world: DeleteProcessWorld) -> None:
    """Five children SIGKILLed in a row (at once after they appear, before or during their start): the
    daemon keeps its requests, and a sixth child deletes them all once.  Each child is held at a gate before
    its first delete until the kills are done, so each kill lands before any (a child killed between its
    deletes and its answer has its batch found, and recorded, absent: another test's subject)."""
    [daemon] = world.add_replicas(1)
    held = gate(world)
    child = started(world, daemon, held.at())
    world.enqueue(world.orphans(30))
    killed = {child}
    for _ in range(5):
        os.kill(child, signal.SIGKILL)
        child = next_child(daemon, child)
        world.children_seen.add(child)
        killed.add(child)
    held.open()
    _deleted_once(world, 120)
    assert daemon.running() and len(killed) == 6


def test_a_child_whose_zookeeper_session_expired_holding_a_batch_recovers(world: DeleteProcessWorld) -> None:
    """The child is stopped past its ZooKeeper session (10 s) while it holds a verified batch: its
    session expires, then it resumes and must still delete every ledger once (none lost, none parked)."""
    [daemon] = world.add_replicas(1)
    held = gate(world)
    child = started(world, daemon, held.at())
    world.enqueue(world.orphans(20))
    wait_until(lambda: HELD in log(world, daemon), 30, "a batch in the child")
    with stopped(child):
        wait_sessions_expired(child, zookeeper_port(world))
        held.open()  # it goes on with its batch the moment it resumes
    _deleted_once(world)
    assert daemon.running()
    assert not [r for rep in world.replicas for r in rep.audit() if r["outcome"] == "dead-lettered"]


def test_the_childs_zookeeper_connections_cut_over_and_over_lose_nothing(world: DeleteProcessWorld) -> None:
    """Reset the child's ZooKeeper connections (only its) every 0.2 s while it drains: deletes in flight
    come back unknown and are read back; nothing deleted twice, nothing lost.  The first batch waits 1 s in
    the child at a gate until the first cut, so the cuts begin while it works however quick the rest of
    the drain is."""
    [daemon] = world.add_replicas(1)
    held = gate(world)
    child = started(world, daemon, held.at())
    port = zookeeper_port(world)
    world.enqueue(world.orphans(300))
    wait_until(lambda: HELD in log(world, daemon), 30, "a batch in the child")
    cuts = 0
    deadline = time.monotonic() + 30
    while world.left() and time.monotonic() < deadline:
        # the child of now: a loaded machine may have the daemon start a new one (the cuts are its too)
        cuts += cut_zookeeper(delete_process(daemon) or child, port)
        held.open()
        time.sleep(0.2)
    _deleted_once(world, 90)
    assert cuts > 0
    assert STARTED in log(world, daemon) and all_children(daemon)


def test_a_child_killed_with_the_next_batch_queued_loses_neither_batch(world: DeleteProcessWorld,
                                                                      module_pulsar_lite: PulsarLiteBroker) -> None:
    """Batches of 10: the child holds one (failpoint), the next waits queued for it; SIGKILL the child.  Both
    batches must come back (reconsumed or decided by the new child), none stranded unacked in the daemon."""
    world.config.write_text(world.config.read_text() + "twoPhaseDeletionBatchSize = 10\n")
    [daemon] = world.add_replicas(1)
    held = gate(world)
    child = started(world, daemon, held.at())
    world.enqueue(world.orphans(60))
    wait_until(lambda: HELD in log(world, daemon), 30, "a batch in the child")
    wait_until(lambda: received(daemon) > 10, 30, "the next batch taken in behind the held one", interval=0.1)
    os.kill(child, signal.SIGKILL)
    held.open()
    _deleted_once(world, 60)
    wait_acked(world, module_pulsar_lite)
    assert daemon.running()


def test_the_daemon_stopped_past_its_sessions_while_the_child_holds_a_batch_recovers(world: DeleteProcessWorld) -> None:
    """The daemon (not the child) is stopped 14 s, past its ZooKeeper session, while its child decides a
    batch and sends back its results: resumed, it settles every request once."""
    [daemon] = world.add_replicas(1)
    held = gate(world)
    started(world, daemon, held.at())
    world.enqueue(world.orphans(20))
    wait_until(lambda: HELD in log(world, daemon), 30, "a batch in the child")
    assert daemon.proc is not None
    with stopped(daemon.proc.pid):
        held.open()  # the child decides its batch and sends back its results to a daemon stopped
        wait_sessions_expired(daemon.proc.pid, zookeeper_port(world))
    _deleted_once(world)
    assert daemon.running()


def test_two_replicas_each_with_a_child_one_child_killed_mid_batch(world: DeleteProcessWorld) -> None:
    first, second = world.add_replicas(2)
    held = gate(world)
    victim = started(world, first, held.at())
    started(world, second, held.at())
    world.enqueue(world.orphans(200))
    wait_until(lambda: HELD in log(world, first), 30, "a batch in the first replica's child")
    os.kill(victim, signal.SIGKILL)
    held.open()
    _deleted_once(world, 90)
    assert first.running() and second.running()


def _stop_the_child_as_it_spawns(daemon: Replica, marker: str) -> int:
    """SIGSTOP the daemon's child whose command line names ``marker`` the moment it appears."""
    assert daemon.proc is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and daemon.proc.poll() is None:
        for pid in children_of(daemon.proc.pid):
            if marker in _cmdline(pid):
                os.kill(pid, signal.SIGSTOP)
                return pid
        time.sleep(0.001)
    raise AssertionError(f"no child {marker} spawned")


MARKER = "ledger-deletion-delete-process"


@pytest.mark.parametrize("sig", [
    signal.SIGTERM,
    pytest.param(signal.SIGKILL, marks=pytest.mark.xfail(
        strict=True, reason="left open: a delete process stopped in the ~15 ms before its "
                            "interpreter runs its first line (which asks to die with the daemon) outlives a "
                            "SIGKILLed daemon, stopped, until continued (then it exits at once); only arming it "
                            "before exec would close that, and a fork of the threaded daemon may not run Python")),
])
def test_a_child_stopped_as_it_spawns_goes_with_its_daemon(world: DeleteProcessWorld, sig: int) -> None:
    """The delete process is stopped before it has run a line of ours (an operator's SIGSTOP, a cgroup
    freezer): the daemon must still stop within its bound, and take it along.  (Multiprocessing's resource
    tracker, a second child once, is gone: the daemon starts its delete process itself.)"""
    marker = MARKER
    [daemon] = world.add_replicas(1)
    daemon.start()
    child = _stop_the_child_as_it_spawns(daemon, marker)
    world.children_seen.add(child)
    # the daemon's start waits for this child (its admin API, up by then, names it), so the signal
    # meets that wait
    wait_until(lambda: f"the delete process (pid {child}) is starting" in readyz_text(daemon), 30,
               "the daemon waiting for its stopped delete process", daemon.proc, interval=0.1)
    try:
        seconds, code = sigterm_seconds(daemon, bound=25) if sig == signal.SIGTERM else (0.0, daemon.stop(sig))
        assert seconds <= 20, (seconds, code, log(world, daemon)[-2000:])
        wait_until(lambda: gone(child), 10, f"the stopped {marker} child gone with its daemon")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGCONT)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return "?"


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_every_child_of_the_daemon_goes_with_it(world: DeleteProcessWorld, sig: int) -> None:
    """Not only the delete process: whatever else the daemon started for it (multiprocessing's helpers)."""
    [daemon] = world.add_replicas(1)
    started(world, daemon)
    world.enqueue(world.orphans(20))
    world.wait_drained(30)
    children = all_children(daemon)
    world.children_seen.update(children)
    daemon.stop(sig)
    wait_until(lambda: all(gone(pid) for pid in children), 10,
               f"every child gone: {[(pid, _cmdline(pid)) for pid in children if not gone(pid)]}")
