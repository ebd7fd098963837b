"""The daemon's stop bound with its audit trail held: another process on the host holds the
trail's file lock (``flock`` on ``audit/anchor``: a backup taking a consistent copy, a hung network volume
behaves alike) while the delete process works.  The daemon must stop deleting past the batch it cannot
record, and SIGTERM must still end it within its 20 s bound.

Real processes: ``ledger-deletion run`` on the session's ZooKeeper (a chroot per test) and this module's
pulsar-lite; the lock is taken by this test's process, a process other than the daemon.
"""

from __future__ import annotations

import fcntl
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.audited_drain import BATCH, draining, unrecorded
from tests.support.delete_process_world import DeleteProcessWorld, log, sigterm_seconds, world
from tests.support.harness import wait_until
from tests.support.replicas_world import Replica

__all__ = ["world"]


@contextmanager
def _trail_locked(daemon: Replica) -> Iterator[None]:
    """The daemon's audit trail locked by this process for the block (as ``flock audit/anchor cp ...``)."""
    fd = os.open(Path(daemon.data_dir) / "audit" / "anchor", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def test_sigterm_ends_the_daemon_in_time_while_another_process_holds_its_audit_lock(world: DeleteProcessWorld) -> None:
    daemon = draining(world)
    with _trail_locked(daemon):
        wait_until(lambda: len(unrecorded(world)) > 0, 60, "a batch deleted that the daemon cannot record")
        seconds, code = sigterm_seconds(daemon, bound=22)
        assert len(unrecorded(world)) <= BATCH, sorted(unrecorded(world))
    assert seconds <= 20, (seconds, code, log(world, daemon)[-1500:])


def test_a_daemon_that_cannot_record_deletes_no_further_batch(world: DeleteProcessWorld) -> None:
    """Held: with the trail locked, the delete process stops after the one batch it deleted unrecorded, and
    a SIGKILL then leaves only that batch unrecorded (its requests are recorded ``absent`` after)."""
    daemon = draining(world)
    with _trail_locked(daemon):
        wait_until(lambda: len(unrecorded(world)) > 0, 60, "a batch deleted that the daemon cannot record")
        left = len(world.left())
        time.sleep(2)  # what must not happen (more deletes) would happen now: no event says it did not
        assert len(world.left()) == left
        assert daemon.stop(signal.SIGKILL) == -signal.SIGKILL
    assert len(unrecorded(world)) <= BATCH, sorted(unrecorded(world))
