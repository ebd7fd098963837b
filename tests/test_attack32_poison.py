"""Attacks on the delete process (issue 29) with a poisoned BookKeeper znode: metadata the decoder accepts
but whose custom-metadata key is not UTF-8 (a corrupted znode, or any client with write access to the
ledgers tree), named by one request among innocent ones in the same batch.

Real processes: ``ledger-deletion run`` on the session's ZooKeeper (a chroot per test) and pulsar-lite.  The
safety note this holds the daemon to: one bad message never fails its batch.
"""

from __future__ import annotations

import pytest

from deletion_service.cluster_writer import pulsar_custom_metadata
from metastore.formats.ledger_paths import ledger_path
from metastore.interface import ABSENT
from tests.harness import wait_until
from tests.test_attack30_support import settled
from tests.test_attack32_support import AttackWorld, log, started, world

__all__ = ["world"]

POISON = 90_001


def _poisoned_znode(world: AttackWorld, ledger_id: int) -> None:
    """A closed Pulsar ledger of the world's topic whose ``application`` key's first byte is 0xFF."""
    path = world.writer.bk_ledger(ledger_id, pulsar_custom_metadata(world.topic))
    node = world.store.get(path)
    assert node is not None
    data = bytearray(node.data)
    data[data.index(b"application")] = 0xFF
    world.store.delete(path, node.version)
    world.store.put(ledger_path(world.writer.root, ledger_id, world.writer.layout), bytes(data), ABSENT)


@pytest.mark.xfail(strict=True, reason="attack32 finding 3: a BookKeeper custom-metadata key that is not UTF-8 "
                                       "raises in Evidence.of: the delete process dies and its whole batch is "
                                       "reconsumed (off: the batch is stranded unacked)")
@pytest.mark.parametrize("mode", ["on", "off"])
def test_one_poisoned_znode_does_not_fail_its_batch(world: AttackWorld, mode: str) -> None:
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
    wait_until(lambda: bool(settled(world, POISON)), 20, "the poisoned request settled")
    outcomes = {lid: settled(world, lid) for lid in innocent}
    assert all(o == ["deleted"] for o in outcomes.values()), (outcomes, log(world, daemon)[-3000:])
    assert not world.left()
