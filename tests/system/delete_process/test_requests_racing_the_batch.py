"""The delete process, driven from outside, with requests and metadata writes timed against the batch it
holds (failpoint ``delete.before-storage=sleep``, inherited by the child), and with config.

Real processes: ``ledger-deletion run`` on the session's ZooKeeper (a chroot per test) and pulsar-lite.
"""

from __future__ import annotations

import subprocess
import sys

from tests.support.delete_process_world import (
    HELD,
    STARTED,
    DeleteProcessWorld,
    delete_process,
    gate,
    log,
    received,
    started,
    world,
)
from tests.support.harness import wait_until
from tests.support.replica_tools import settled, start_with
from tests.support.replicas_world import ROOT

__all__ = ["world"]

def test_one_ledger_in_consecutive_batches_is_deleted_and_recorded_once(world: DeleteProcessWorld) -> None:
    """The first request is held in the child; the second for the same ledger arrives in the next batch,
    which the daemon may gather while the first is still undecided.

    The second request is sent alone: the lane takes one batch beside the one in the child, and a
    batch ends at the first gap in arrivals, so requests sent with it could fill that batch without
    it (requests arrive partition by partition).  The others follow once it is in hand."""
    [daemon] = world.add_replicas(1)
    held = gate(world)
    started(world, daemon, held.at())
    [lid] = world.orphans(1)
    world.enqueue([lid])
    wait_until(lambda: HELD in log(world, daemon), 30, "the first batch in the child")
    world.enqueue([lid])
    wait_until(lambda: received(daemon) >= 2, 30, "the second request taken in while the first is held")
    world.enqueue(world.orphans(5))
    held.open()
    world.wait_drained(60)
    wait_until(lambda: len(settled(world, lid)) >= 2, 30, "both requests settled")
    assert sorted(settled(world, lid)) == ["absent", "deleted"], settled(world, lid)
    assert all(n == 1 for n in world.deletions().values()), world.deletions()


def test_one_ledger_twice_in_one_batch_is_deleted_and_recorded_once(world: DeleteProcessWorld) -> None:
    [daemon] = world.add_replicas(1)
    started(world, daemon)
    [lid] = world.orphans(1)
    world.enqueue([lid, lid, lid])
    world.wait_drained(60)
    wait_until(lambda: len(settled(world, lid)) >= 3, 30, "the three requests settled")
    assert sorted(settled(world, lid)) == ["absent", "absent", "deleted"], settled(world, lid)


def test_dry_run_with_the_delete_process_deletes_nothing(world: DeleteProcessWorld) -> None:
    [daemon] = world.add_replicas(1)
    start_with(daemon, "--dry-run").wait_ready()
    ids = world.orphans(10)
    world.enqueue(ids)
    wait_until(lambda: log(world, daemon).count("dry run: would delete (verified)") == 10, 30, "the verdicts")
    assert "decided in the delete process" in log(world, daemon)
    assert sorted(world.left()) == ids
    assert not world.deletions()


def test_on_with_the_embedded_store_is_refused_in_one_line(tmp_path) -> None:  # noqa: ANN001 - pytest's
    out = subprocess.run([sys.executable, "-m", "deletion_service.cli.main", "--data-dir", str(tmp_path / "d"),
                          "--set", "ledgerDeletionDeleteProcess=on", "run", "--exit-when-idle"],
                         capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "ZooKeeper" in out.stderr


def test_a_batch_of_ten_thousand_goes_through_the_child(world: DeleteProcessWorld) -> None:
    world.config.write_text(world.config.read_text() + "twoPhaseDeletionBatchSize = 10000\n")
    [daemon] = world.add_replicas(1)
    started(world, daemon)
    world.enqueue(world.orphans(3000))
    world.wait_drained(120)
    assert all(n == 1 for n in world.deletions().values())
    assert STARTED in log(world, daemon) and delete_process(daemon) is not None
