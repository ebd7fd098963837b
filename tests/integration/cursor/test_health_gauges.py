"""The daemon's cursor-health gauges, read from a real ZooKeeper (a chroot of the
session server): what ``cursor health`` says, per status; a series only for the cursors near or over
the budget; a restricted daemon names only its own namespaces' cursors; a store that cannot be read
keeps the last reading (a cursor near its budget must not look fine because ZooKeeper blinked).
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import generate_latest

from deletion_service.cluster_writer import ClusterWriter
from deletion_service.cursor.ack_budget import PersistBudget
from deletion_service.daemon.gauges import CursorHealthWatch
from deletion_service.metrics import DeletionMetrics
from metastore import open_store
from metastore.formats import ManagedCursorInfo, MessageRange, Position, cursor_path, encode_cursor
from metastore.interface import ANY

BUDGET = 1024


def _ranges(n: int) -> ManagedCursorInfo:
    return ManagedCursorInfo(-1, Position(1, 0), [MessageRange(Position(1, 2 * k), Position(1, 2 * k + 1))
                                                  for k in range(1, n + 1)])


def _exported(m: DeletionMetrics) -> dict[str, float]:
    out = {}
    for line in generate_latest(m.registry).decode().splitlines():
        if "cursor" in line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_the_gauges_say_what_cursor_health_says(zk_url: str) -> None:
    with open_store(zk_url) as store:
        writer = ClusterWriter(store)
        for topic in ("persistent://a/ns/x", "persistent://a/ns/y", "persistent://b/ns/z"):
            writer.managed_ledger(topic, [1])
            writer.cursor(topic, "fine", Position(1, 0))
        store.put(cursor_path("persistent://a/ns/x", "slow"), encode_cursor(_ranges(60)), ANY)  # ~900 B: near
        store.put(cursor_path("persistent://b/ns/z", "slow"), encode_cursor(_ranges(80)), ANY)  # ~1.2 KB: over
        metrics = DeletionMetrics()
        scope: list[Callable[[str], bool] | None] = [None]
        watch = CursorHealthWatch(store, PersistBudget(max_bytes=BUDGET), metrics.cursors, lambda: scope[0])
        assert _exported(metrics) == {}  # before the first check: no sample, never a false "all fine"
        watch.check()
        seen = _exported(metrics)
        assert {k: v for k, v in seen.items() if "_cursors{" in k} == {
            f'pulsar_ledger_deletion_cursors{{status="{s}"}}': n
            for s, n in {"ok": 3, "near": 1, "over": 1, "cursor-ledger": 0, "undecodable": 0}.items()}
        sizes = {k for k in seen if "cursor_state_bytes{" in k}
        assert sizes == {
            'pulsar_ledger_deletion_cursor_state_bytes{namespace="a/ns",subscription="slow",topic="persistent://a/ns/x"}',
            'pulsar_ledger_deletion_cursor_state_bytes{namespace="b/ns",subscription="slow",topic="persistent://b/ns/z"}'}
        assert seen["pulsar_ledger_deletion_cursor_state_budget_bytes"] == BUDGET

        scope[0] = lambda namespace: namespace.startswith("a/")  # run --tenant a
        watch.check()
        assert [k for k in _exported(metrics) if "persistent://b/" in k] == []
        assert _exported(metrics)['pulsar_ledger_deletion_cursors{status="ok"}'] == 2

    watch.check()  # the store is closed now: logged once, the last reading stays
    assert watch._warned  # noqa: SLF001 - the check failed (and said so), it did not read an empty cluster
    assert _exported(metrics)['pulsar_ledger_deletion_cursors{status="near"}'] == 1
