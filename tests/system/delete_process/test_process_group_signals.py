"""The delete process, driven from outside, with a signal to the daemon's whole process group, as a terminal's
Ctrl-C (SIGINT) or systemd's default ``KillMode=control-group`` (SIGTERM to every process of the unit) sends
it: the child gets the signal at the same moment as the daemon, while it holds a batch.

Real processes: ``ledger-deletion run`` on the session's ZooKeeper (a chroot per test) and pulsar-lite.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.support.delete_process_world import DeleteProcessWorld, gone, log, signal_group, started, world
from tests.support.harness import wait_until

__all__ = ["world"]

HELD = "failpoint delete.before-storage: sleep"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_process_group_stops_the_daemon_cleanly(world: DeleteProcessWorld, sig: int) -> None:
    [daemon] = world.add_replicas(1)
    child = started(world, daemon, "delete.before-storage=sleep:3@1", own_group=True)
    world.enqueue(world.orphans(20))
    wait_until(lambda: HELD in log(world, daemon), 30, "a batch in the child")
    before = len(log(world, daemon))
    sent = signal_group(daemon, sig)
    assert daemon.proc is not None
    code = daemon.proc.wait(40)
    seconds = time.monotonic() - sent
    after = log(world, daemon)[before:]
    assert seconds <= 20, (seconds, after[-3000:])
    assert code == 0, (code, after[-3000:])
    wait_until(lambda: gone(child), 10, "the delete process gone")
    assert "Traceback" not in after, after[-3000:]
    assert "starting a new delete process" not in after, after[-3000:]
    daemon.start().wait_ready()
    world.wait_drained(60)
    assert all(n == 1 for n in world.deletions().values()), world.deletions()
