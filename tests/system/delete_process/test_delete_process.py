"""The delete process: the daemon decides BookKeeper requests in a child process of its own.

Real processes throughout: ``ledger-deletion run`` on the session ZooKeeper (a chroot per test) and a
pulsar-lite process of this module; the judge reads ZooKeeper and the daemon's audit trail.  What must
hold: the child is the daemon's (it dies with it, a failpoint there kills both), a child that dies alone
costs its batch one reconsume and nothing else, and a SIGTERM settles the batch it holds.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deletion_service.delete_phase.process.choice import usable_cpus, use_delete_process
from deletion_service.errors import UsageError
from tests.support.delete_process_world import HELD, delete_process, gate, gone, received
from tests.support.harness import PulsarLiteBroker, wait_until
from tests.support.replicas_world import Replica, ReplicaWorld

KILLED = -signal.SIGKILL


@pytest.fixture
def lite(module_pulsar_lite: PulsarLiteBroker) -> PulsarLiteBroker:
    """This module's own pulsar-lite (conftest): daemons here are SIGKILLed, some restart it."""
    return module_pulsar_lite


@pytest.fixture
def world(tmp_path: Path, zk_url: str, lite: PulsarLiteBroker) -> Iterator[ReplicaWorld]:
    w = ReplicaWorld(tmp_path, zk_url, lite.service_url)
    yield w
    w.close()


def _log(world: ReplicaWorld, replica: Replica) -> str:
    return (world.root / f"{replica.name}.log").read_text(errors="replace")


def _started(world: ReplicaWorld, replica: Replica, failpoint: str | None = None) -> int:
    """Start ``replica`` and wait for its start line (the admin API answers before it); its delete process's PID."""
    replica.start(failpoint).wait_ready()
    wait_until(lambda: "BookKeeper requests decided in" in _log(world, replica), 30, "the start line")
    child = delete_process(replica)
    assert child is not None, _log(world, replica)[-2000:]
    assert f"decided in the delete process (pid {child})" in _log(world, replica)
    return child


def _deleted_once(world: ReplicaWorld) -> None:
    world.wait_drained(90)
    deleted = world.deletions()
    assert set(deleted) == set(world.ledgers), sorted(set(world.ledgers) - set(deleted))[:10]
    assert not {lid: n for lid, n in deleted.items() if n > 1}


def test_the_daemon_decides_in_its_delete_process_which_dies_with_it(world: ReplicaWorld) -> None:
    [daemon] = world.add_replicas(1)
    child = _started(world, daemon)
    world.enqueue(world.orphans(300))
    _deleted_once(world)
    assert daemon.stop(signal.SIGKILL) == KILLED
    wait_until(lambda: gone(child), 10, "the delete process gone with its daemon")


def test_a_delete_process_killed_alone_costs_its_batch_one_reconsume(world: ReplicaWorld) -> None:
    """The child is SIGKILLed holding a batch (a failpoint holds it before any delete): the daemon says
    so, reconsumes that batch (RETRY, 2 s here), starts a new child, and every ledger is deleted once
    (the new child inherits the failpoint: its gate is open by then)."""
    [daemon] = world.add_replicas(1)
    held = gate(world)
    first = _started(world, daemon, held.at())
    world.enqueue(world.orphans(50))
    wait_until(lambda: HELD in _log(world, daemon), 30, "a batch in the child")
    os.kill(first, signal.SIGKILL)
    held.open()
    _deleted_once(world)
    log = _log(world, daemon)
    assert "the delete process died (killed by signal 9)" in log, log[-3000:]
    second = delete_process(daemon)
    assert second is not None and second != first
    assert daemon.running()
    reconsumed = [r for r in daemon.audit() if r["outcome"] == "reconsumed"]
    # the batch the child held (the 50 may have come in two batches, the second waiting in the lane)
    assert 1 <= len(reconsumed) <= 50, [r["reason"] for r in reconsumed][:3]
    assert all("the delete process died" in r["reason"] for r in reconsumed)
    assert daemon.stop() == 0
    wait_until(lambda: gone(second), 10, "the new delete process stopped with its daemon")


def test_a_failpoint_kill_in_the_delete_process_kills_the_daemon(world: ReplicaWorld) -> None:
    """The soak's kills mean "the daemon dies here": at ``delete.before-storage``, now reached in the child."""
    [daemon] = world.add_replicas(1)
    child = _started(world, daemon, "delete.before-storage=kill@1")
    world.enqueue(world.orphans(40))
    assert daemon.proc is not None and daemon.proc.wait(60) == KILLED
    wait_until(lambda: gone(child), 10, "the delete process gone too")
    assert sorted(world.left()) == world.ledgers  # killed before any delete
    daemon.start().wait_ready()
    _deleted_once(world)


def test_a_daemon_killed_disposing_of_a_batch_leaves_no_later_delete_unrecorded(world: ReplicaWorld) -> None:
    """Batches of 10.  The daemon is held at its first batch's first ack (records written) while its
    delete process has the next batches in hand, then SIGKILLed: every ledger gone from ZooKeeper must
    be one its audit trail records ``deleted``.  Before the child waited for the batch before's records,
    it deleted the next batch meanwhile, unrecorded (recorded ``absent`` later)."""
    world.config.write_text(world.config.read_text() + "twoPhaseDeletionBatchSize = 10\n")
    [daemon] = world.add_replicas(1)
    _started(world, daemon, "delete.before-ack=sleep:30@1")
    world.enqueue(world.orphans(60))
    wait_until(lambda: "failpoint delete.before-ack: sleep" in _log(world, daemon), 30, "the first batch recorded")
    time.sleep(1.5)  # what must not happen (the next batch deleted) would happen now: no event says it did not
    assert daemon.stop(signal.SIGKILL) == KILLED
    gone_from_zookeeper = set(world.ledgers) - set(world.left())
    recorded = set(world.deletions())
    # the first batch: at most 10 (a loaded machine may take it before all 10 requests arrived)
    assert 0 < len(recorded) <= 10, sorted(recorded)
    assert gone_from_zookeeper == recorded, f"deleted, not recorded: {sorted(gone_from_zookeeper - recorded)}"


def test_sigterm_settles_the_batch_the_delete_process_holds(world: ReplicaWorld) -> None:
    """SIGTERM while the child holds a batch and the rest wait behind it: the daemon lets the child
    finish and settles every request in hand before it exits."""
    [daemon] = world.add_replicas(1)
    held = gate(world)
    _started(world, daemon, held.at())
    world.enqueue(world.orphans(30))
    wait_until(lambda: HELD in _log(world, daemon), 30, "a batch in the child")
    # all 30 in hand first: on a loaded machine the child's batch may hold only the first few
    wait_until(lambda: received(daemon) >= 30, 30, "every request in hand")
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGTERM)
    wait_until(lambda: "stopping: finishing the batch in hand" in _log(world, daemon), 30, "the daemon stopping")
    held.open()
    assert daemon.stop() == 0
    assert world.left() == []
    assert sorted(world.deletions()) == world.ledgers
    # settled before the exit, by whichever path took the child's answer first: recorded, each once
    assert sorted(r["request"]["ledgerId"] for r in daemon.audit() if r["outcome"] == "deleted") == world.ledgers


@pytest.mark.parametrize(("choice", "urls", "cpus", "expected"), [
    ("auto", ["zk://127.0.0.1:2181/a"], 2.0, True),
    ("auto", ["zk://127.0.0.1:2181/a"], 1.0, False),
    ("auto", ["zk://127.0.0.1:2181/a", "sqlite:///tmp/x/metadata.db"], 4.0, False),
    ("off", ["zk://127.0.0.1:2181/a"], 8.0, False),
    ("on", ["zk://127.0.0.1:2181/a"], 1.0, True),
])
def test_when_the_delete_process_is_used(choice: str, urls: list[str], cpus: float, expected: bool) -> None:
    assert use_delete_process(choice, urls, cpus) is expected


def test_on_with_the_embedded_store_is_refused_in_one_line() -> None:
    with pytest.raises(UsageError, match="needs a ZooKeeper metadata store"):
        use_delete_process("on", ["sqlite:///tmp/x/metadata.db"], 4.0)


def test_a_container_quota_caps_the_cpus(tmp_path: Path) -> None:
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text("100000 100000\n")
    assert usable_cpus(cpu_max) == 1.0
    cpu_max.write_text("max 100000\n")
    assert usable_cpus(cpu_max) >= 1.0
    assert usable_cpus(tmp_path / "missing") >= 1.0
