"""The delete process, driven from outside, with a poisoned BookKeeper znode: metadata the decoder accepts
but whose custom-metadata key is not UTF-8 (a corrupted znode, or any client with write access to the
ledgers tree), named by one request among innocent ones in the same batch.

Real processes: ``ledger-deletion run`` on the session's ZooKeeper (a chroot per test) and pulsar-lite.  The
safety note this holds the daemon to: one bad message never fails its batch.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from deletion_service.cluster_writer import bucket_custom_metadata, pulsar_custom_metadata
from metastore.formats.ledger_paths import ledger_path
from metastore.formats.position import Position
from metastore.interface import ABSENT
from tests.support.delete_process_world import DeleteProcessWorld, log, started, world
from tests.support.harness import wait_until
from tests.support.replica_tools import settled

__all__ = ["world"]

POISON = 90_001


def _poisoned_znode(world: DeleteProcessWorld, ledger_id: int) -> None:
    """A closed Pulsar ledger of the world's topic whose ``application`` key's first byte is 0xFF."""
    path = world.writer.bk_ledger(ledger_id, pulsar_custom_metadata(world.topic))
    node = world.store.get(path)
    assert node is not None
    data = bytearray(node.data)
    data[data.index(b"application")] = 0xFF
    world.store.delete(path, node.version)
    world.store.put(ledger_path(world.writer.root, ledger_id, world.writer.layout), bytes(data), ABSENT)


@pytest.mark.parametrize("mode", ["on", "off"])
def test_one_poisoned_znode_does_not_fail_its_batch(world: DeleteProcessWorld, mode: str) -> None:
    """``on``: the child decides the batch; ``off``: the daemon's own thread does (the same pipeline)."""
    world.config.write_text(world.config.read_text() + f'ledgerDeletionDeleteProcess = "{mode}"\n')
    [daemon] = world.add_replicas(1)
    if mode == "on":
        started(world, daemon)
    else:
        daemon.start().wait_ready()
    _poisoned_znode(world, POISON)
    innocent = world.orphans(30)
    world.enqueue([POISON, *innocent])
    wait_until(lambda: bool(settled(world, POISON)), 60, "the poisoned request settled")
    # a loaded machine may split the requests over more than one batch: each innocent one settles in its own
    wait_until(lambda: all(settled(world, lid) for lid in innocent), 60, "every innocent request settled")
    outcomes = {lid: settled(world, lid) for lid in innocent}
    assert all(o == ["deleted"] for o in outcomes.values()), (outcomes, log(world, daemon)[-3000:])
    assert not world.left()


def _enqueue(world: DeleteProcessWorld, requests: list[dict]) -> None:
    """``enqueue --from-file`` of ``requests`` as they are."""
    lines = world.root / f"poison-{requests[0]['ledgerId']}.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in requests))
    out = subprocess.run([*world.argv(world.root / "enqueue-data"), "enqueue", "--from-file", str(lines)],
                         env=world.env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def _poisoned_cursor(world: DeleteProcessWorld, topic: str) -> None:
    """A cursor of ``topic`` whose one cursor-property key's first byte is 0xFF (a broker's node, corrupted)."""
    world.writer.managed_ledger(topic, [1, 2])
    path = world.writer.cursor(topic, "sub", Position(1, 0), cursor_properties={"poison-key": "1"})
    node = world.store.get(path)
    assert node is not None
    data = bytearray(node.data)
    data[data.index(b"poison-key")] = 0xFF
    world.store.put(path, bytes(data), node.version)


def test_one_poisoned_cursor_node_does_not_fail_the_batches_it_is_in(world: DeleteProcessWorld) -> None:
    """A cursor-property key that is not UTF-8 makes the reference model raise while gathering: the batch is
    gathered again request by request, so only the request of that topic is reconsumed (an internal error)."""
    [daemon] = world.add_replicas(1)
    started(world, daemon)
    poisoned_topic = f"{world.topic}-poisoned"
    _poisoned_cursor(world, poisoned_topic)
    world.writer.bk_ledger(POISON, bucket_custom_metadata(poisoned_topic, "sub"))
    world.ledgers.append(victim := POISON)
    innocent = world.orphans(30)
    _enqueue(world, [{"topicName": poisoned_topic, "ledgerComponent": "DELAYED_INDEX_BUCKET", "cursorName": "sub",
                      "ledgerType": "LEDGER", "ledgerId": victim, "reason": "orphan"},
                     *({"topicName": world.topic, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER",
                        "ledgerId": lid, "reason": "orphan"} for lid in innocent)])
    wait_until(lambda: bool(settled(world, victim)), 60, "the poisoned topic's request settled")
    assert settled(world, victim) == ["reconsumed"]
    # the poisoned request's batch settles it; the innocent ones may be in that batch or later ones
    wait_until(lambda: all(settled(world, lid) for lid in innocent), 60, "every innocent request settled")
    outcomes = {lid: settled(world, lid) for lid in innocent}
    assert all(o == ["deleted"] for o in outcomes.values()), (outcomes, log(world, daemon)[-3000:])
