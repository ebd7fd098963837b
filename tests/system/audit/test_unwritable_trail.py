"""Audit completeness with a trail the daemon cannot write: its file made immutable mid-drain
(``chattr +i``; a full disk, a volume remounted read-only or failing with EIO refuse the append alike).
Every ledger gone from ZooKeeper must be one the trail records ``deleted``, but for at most the batch in
hand: a daemon that cannot record must stop deleting, not go on with its records only in its log (where
``audit --ledger`` and ``audit verify`` never look).

Real processes: ``ledger-deletion run`` on the session's ZooKeeper (a chroot per test) and this module's
pulsar-lite; the judge reads ZooKeeper and the trail's files.  Needs root and a file system with ``chattr``.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from tests.support.audited_drain import BATCH, batches, draining, immutable, unrecorded
from tests.support.delete_process_world import DeleteProcessWorld, delete_process, world
from tests.support.harness import wait_until
from tests.support.replicas_world import Replica

__all__ = ["world"]


def _unrecorded_past(world: DeleteProcessWorld, bound: int, within_s: float) -> set[int]:
    """The ledgers deleted unrecorded once more than ``bound`` are, or after ``within_s`` s."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and len(unrecorded(world)) <= bound:
        time.sleep(0.2)
    return unrecorded(world)


def test_a_daemon_that_cannot_write_its_trail_deletes_no_further_batch(world: DeleteProcessWorld) -> None:
    daemon = draining(world)
    files = sorted((daemon.data_dir / "audit").glob("audit-*.jsonl"))
    with immutable(files[-1]):
        found = _unrecorded_past(world, BATCH, within_s=5)
        assert len(found) <= BATCH, (len(found), len(world.left()))
    # writable again: the batch it could not record is recorded now (its messages waited unacked), the drain ends
    world.wait_drained(90)
    deleted = world.deletions()
    assert set(deleted) == set(world.ledgers), sorted(set(world.ledgers) - set(deleted))[:10]
    assert max(deleted.values()) == 1, {lid: n for lid, n in deleted.items() if n > 1}


def test_a_one_process_daemon_that_cannot_write_its_trail_deletes_no_further_batch(world: DeleteProcessWorld) -> None:
    """The same with the delete process off (``ledgerDeletionDeleteProcess = off``): the daemon's own thread
    takes no new batch while its trail refuses records, and records them once it can."""
    batches(world, BATCH)
    world.config.write_text(world.config.read_text() + "maxDeletionsPerSecond = 100\n"
                            'ledgerDeletionDeleteProcess = "off"\n')
    [daemon] = world.add_replicas(1)
    daemon.start().wait_ready()
    world.enqueue(world.orphans(300))
    wait_until(lambda: len(world.left()) < len(world.ledgers) - 20, 60, "the drain under way")
    assert delete_process(daemon) is None
    files = sorted((daemon.data_dir / "audit").glob("audit-*.jsonl"))
    with immutable(files[-1]):
        found = _unrecorded_past(world, BATCH, within_s=5)
        assert len(found) <= BATCH, (len(found), len(world.left()))
        wait_until(lambda: not daemon.ready(), 60, "/readyz failing while the trail refuses records")
        still_there = world.left()[0]
        assert _admin_delete(daemon, world.topic, still_there) == 503  # the admin API's door is shut too
        assert still_there in world.left()
    world.wait_drained(90)
    assert daemon.ready()
    deleted = world.deletions()
    assert set(deleted) == set(world.ledgers), sorted(set(world.ledgers) - set(deleted))[:10]
    assert max(deleted.values()) == 1, {lid: n for lid, n in deleted.items() if n > 1}


def _admin_delete(daemon: Replica, topic: str, ledger_id: int) -> int:
    """The HTTP status of the admin API's synchronous delete of ``ledger_id``."""
    body = json.dumps({"topicName": topic, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER",
                       "ledgerId": ledger_id}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{daemon.port}/admin/v2/ledger-deletion/delete", data=body,
                                 method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_an_idle_daemon_whose_trail_refuses_deletes_nothing_through_the_admin_api(world: DeleteProcessWorld) -> None:
    """With nothing in hand no record has been refused yet, so only the trail itself can say it cannot take
    one: the synchronous delete asks it first, and answers 503 with the ledger left in place rather than
    delete it unrecorded.  Once the trail is writable the same call deletes and records."""
    [daemon] = world.add_replicas(1)
    daemon.start().wait_ready()
    world.enqueue(world.orphans(3))
    world.wait_drained(60)  # the trail has a file now, and the daemon is idle
    first, second = world.orphans(2)
    files = sorted((daemon.data_dir / "audit").glob("audit-*.jsonl"))
    with immutable(files[-1]):
        assert _admin_delete(daemon, world.topic, first) == 503
        assert _admin_delete(daemon, world.topic, second) == 503
        assert {first, second} <= set(world.left()), "nothing deleted while the trail refuses"
    assert _admin_delete(daemon, world.topic, first) == 200
    wait_until(lambda: world.deletions().get(first) == 1, 60, "the admin delete recorded")
    assert first not in world.left() and second in world.left()
    assert unrecorded(world) == set()
