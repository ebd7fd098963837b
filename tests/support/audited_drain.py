"""A daemon draining orphans in small batches on the delete-process world, judged by its audit trail:
the batch size set in its config, a (re)start that returns its delete process's pid, and the ledgers
gone from ZooKeeper that no trail records ``deleted``."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.delete_process_world import STARTED, DeleteProcessWorld, delete_process, log
from tests.support.harness import wait_until
from tests.support.replicas_world import Replica


def batches(world: DeleteProcessWorld, size: int) -> None:
    """Batches of ``size`` requests for the world's daemons (``twoPhaseDeletionBatchSize``)."""
    world.config.write_text(world.config.read_text() + f"twoPhaseDeletionBatchSize = {size}\n")


def unrecorded(world: DeleteProcessWorld) -> set[int]:
    """Ledgers gone from ZooKeeper that no trail records ``deleted``."""
    return set(world.ledgers) - set(world.left()) - set(world.deletions())


def restarted(world: DeleteProcessWorld, daemon: Replica, failpoint: str | None = None) -> int:
    """Start (or restart) ``daemon``; once its new start line is logged, its delete process's pid."""
    lines = log(world, daemon).count(STARTED) if (world.root / f"{daemon.name}.log").exists() else 0
    daemon.start(failpoint).wait_ready()
    wait_until(lambda: log(world, daemon).count(STARTED) > lines, 30, "the start line", daemon.proc)
    wait_until(lambda: delete_process(daemon) is not None, 10, "the delete process", daemon.proc)
    child = delete_process(daemon)
    assert child is not None
    world.children_seen.add(child)
    return child


BATCH = 5


def draining(world: DeleteProcessWorld) -> Replica:
    """A daemon deleting 300 orphans in batches of 5, paced so the drain is still under way."""
    batches(world, BATCH)
    world.config.write_text(world.config.read_text() + "maxDeletionsPerSecond = 100\n")
    [daemon] = world.add_replicas(1)
    restarted(world, daemon)
    world.enqueue(world.orphans(300))
    wait_until(lambda: len(world.left()) < len(world.ledgers) - 20, 60, "the drain under way")
    return daemon


@contextmanager
def immutable(path: Path) -> Iterator[None]:
    """``path`` made immutable (``chattr +i``: no process may write it, root's included) for the block;
    the test is skipped where the file system refuses ``chattr``."""
    made = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"chattr +i refused here: {made.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)
