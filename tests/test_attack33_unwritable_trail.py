"""Attack 33 on audit completeness with a trail the daemon cannot write: its file made immutable mid-drain
(``chattr +i``; a full disk, a volume remounted read-only or failing with EIO refuse the append alike).
Every ledger gone from ZooKeeper must be one the trail records ``deleted``, but for at most the batch in
hand: a daemon that cannot record must stop deleting, not go on with its records only in its log (where
``audit --ledger`` and ``audit verify`` never look).

Real processes: ``ledger-deletion run`` on the session's ZooKeeper (a chroot per test) and this module's
pulsar-lite; the judge reads ZooKeeper and the trail's files.  Needs root and a file system with ``chattr``.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.test_attack32_support import AttackWorld, world
from tests.test_attack33_audit_kills import unrecorded
from tests.test_attack33_audit_lock import BATCH, draining

__all__ = ["world"]


@contextmanager
def _immutable(path: Path) -> Iterator[None]:
    made = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"chattr +i refused here: {made.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def _unrecorded_past(world: AttackWorld, bound: int, within_s: float) -> set[int]:
    """The ledgers deleted unrecorded once more than ``bound`` are, or after ``within_s`` s."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and len(unrecorded(world)) <= bound:
        time.sleep(0.2)
    return unrecorded(world)


@pytest.mark.xfail(strict=True, reason="attack33 finding 2: a daemon whose audit trail cannot be written goes on "
                                       "deleting every batch, its records only logged at ERROR (hundreds of "
                                       "ledgers gone that the trail never names)")
def test_a_daemon_that_cannot_write_its_trail_deletes_no_further_batch(world: AttackWorld) -> None:
    daemon = draining(world)
    files = sorted((daemon.data_dir / "audit").glob("audit-*.jsonl"))
    with _immutable(files[-1]):
        found = _unrecorded_past(world, BATCH, within_s=5)
        assert len(found) <= BATCH, (len(found), len(world.left()))
