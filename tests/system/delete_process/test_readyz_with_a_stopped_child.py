"""The delete process, driven from outside, aimed at the daemon's health answer: its child alive but unable
to progress, while the daemon's own thread (which answers ``/readyz``) is fine.

Real processes: ``ledger-deletion run`` on the session's ZooKeeper (a chroot per test) and pulsar-lite.
"""

from __future__ import annotations

from tests.support.delete_process_world import (
    DeleteProcessWorld,
    readyz,
    started,
    stopped,
    world,
)
from tests.support.harness import poll, wait_until
from tests.support.replicas_world import Replica

__all__ = ["world"]

#: How long a daemon that cannot delete anything may go on answering /readyz 200 (two ZooKeeper session
#: timeouts and more; the daemon's own breakers open well within it).
STALL_S = 20


def _readyz_until_not_ready(daemon: Replica, seconds: float) -> list[int]:
    """Ask /readyz every second for ``seconds`` or until it is not 200; every answer, in order."""
    codes: list[int] = []

    def not_ready() -> bool:
        codes.append(readyz(daemon))
        return codes[-1] != 200

    poll(not_ready, seconds, interval=1)
    return codes


def test_readyz_fails_while_the_stopped_delete_process_holds_requests(world: DeleteProcessWorld) -> None:
    """Nothing can be deleted while the child is stopped (SIGSTOP: a debugger, a cgroup freezer, a stuck
    page fault): /readyz must not keep answering 200."""
    [daemon] = world.add_replicas(1)
    child = started(world, daemon)
    with stopped(child):
        world.enqueue(world.orphans(20))
        codes = _readyz_until_not_ready(daemon, STALL_S)
        left = len(world.left())
    assert codes[-1] != 200, f"/readyz answered 200 for {STALL_S} s with {left} of 20 requests undeleted"
    world.wait_drained(60)  # continued (its ZooKeeper session may have expired meanwhile), it drains
    wait_until(lambda: readyz(daemon) == 200, 30, "/readyz 200 again", interval=0.5)
