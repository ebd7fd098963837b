"""The leak watcher against a stand-in for a stock broker, which deletes in one phase: metadata first,
then storage, and here the storage delete fails for some ledgers.  Real components: the embedded
SQLite store and pulsar-lite of a data dir, ``enqueue`` and the daemon (``run``) as processes.

The watcher's passes run in this process at chosen times (the settle delay is waited on the clock
it is given, not slept); the requests it finds go out as ``enqueue`` sends them, and the daemon
verifies and deletes them as any other request.  Each ledger the broker deleted itself must get no
request, each leak exactly one, and no live ledger any.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata, schema_custom_metadata
from deletion_service.leak_watcher.storage import still_stored
from deletion_service.leak_watcher.watcher import LeakWatcher
from deletion_service.protocol.request import PendingDeleteLedgerInfo, Reason
from metastore import open_store
from metastore.formats import Position, ledger_path
from metastore.formats.pulsar_paths import managed_ledger_path
from metastore.interface import MetadataStore
from offloaders.registry import OffloaderSettings
from tests.support.cli_runner import run_cli
from tests.support.harness import free_port

TOPIC = "persistent://t/ns/orders"
GONE = "persistent://t/ns/deleted"
OLD_MS = int(time.time() * 1000) - 3 * 86_400_000
SETTLE_S = 120.0


def _present(store: MetadataStore, ids: list[int]) -> list[int]:
    return [lid for lid in ids if store.get(ledger_path("/ledgers", lid, "hierarchical")) is not None]


def _delete(store: MetadataStore, path: str) -> None:
    """What the broker does, at the version it read."""
    node = store.get(path)
    assert node is not None, path
    store.delete(path, node.version)


def _seed(store: MetadataStore) -> ClusterWriter:
    w = ClusterWriter(store)
    w.ensure_layout()
    for lid in (1, 2, 3, 4):
        w.bk_ledger(lid, pulsar_custom_metadata(TOPIC), ctime_ms=OLD_MS)
    w.bk_ledger(55, pulsar_custom_metadata(TOPIC, cursor="sub"), ctime_ms=OLD_MS)
    w.bk_ledger(90, schema_custom_metadata(TOPIC), ctime_ms=OLD_MS)
    for lid in (10, 11):
        w.bk_ledger(lid, pulsar_custom_metadata(GONE), ctime_ms=OLD_MS)
    w.managed_ledger(TOPIC, [1, 2, 3, 4])
    w.cursor(TOPIC, "sub", Position(3, -1), cursors_ledger_id=55)
    w.schema(TOPIC, [90])
    w.managed_ledger(GONE, [10, 11])
    return w


def test_a_one_phase_delete_that_failed_is_requested_and_deleted_and_one_that_worked_is_not(tmp_path: Path) -> None:
    data_dir = tmp_path / "d"
    data_dir.mkdir()
    url = f"sqlite:///{data_dir / 'metadata.db'}"
    sent: list[PendingDeleteLedgerInfo] = []
    with open_store(url) as store:
        w = _seed(store)
        check = still_stored(store, "/ledgers", "hierarchical", OffloaderSettings())
        def send(requests: Sequence[PendingDeleteLedgerInfo]) -> list[PendingDeleteLedgerInfo]:
            sent.extend(requests)
            return []  # every one taken

        watcher = LeakWatcher(store, check, send, SETTLE_S, clock_ms=lambda: int(time.time() * 1000))
        first = watcher.run_pass(now=0)
        assert (first.departed, first.requested) == (0, [])  # the first pass only looks

        # The stock broker trims ledgers 1 and 2: metadata first...
        w.managed_ledger(TOPIC, [3, 4])
        _delete(store, ledger_path("/ledgers", 1, "hierarchical"))  # ...then storage: 1's delete worked, 2's failed
        # ...and deletes topic GONE: its metadata goes, ledger 10's storage delete works, 11's fails
        _delete(store, managed_ledger_path(GONE))
        _delete(store, ledger_path("/ledgers", 10, "hierarchical"))

        second = watcher.run_pass(now=10)
        assert second.departed == 4 and second.requested == []  # 1, 2, 10, 11 departed; none settled yet
        assert watcher.run_pass(now=10 + SETTLE_S - 1).requested == []
        third = watcher.run_pass(now=10 + SETTLE_S)
        assert sorted(r.ledger_id for r in third.requested) == [2, 11]
        assert third.deleted_by_broker == 2  # 1 and 10: the broker's own delete worked, no request
        assert {r.reason for r in third.requested} == {Reason.LEAKED}
        assert watcher.run_pass(now=10 + 2 * SETTLE_S).requested == []  # each leak requested once

    lines = tmp_path / "leaks.jsonl"
    lines.write_text("".join(json.dumps(r.wire()) + "\n" for r in sent))
    enqueued = run_cli("enqueue", "--from-file", str(lines), "--data-dir", str(data_dir), timeout=60)
    assert enqueued.returncode == 0, enqueued.stderr
    drained = run_cli("run", "--exit-when-idle", "--max-wait", "60", "--admin-address", f"127.0.0.1:{free_port()}",
                      "--data-dir", str(data_dir), timeout=180)
    assert drained.returncode == 0, drained.stderr
    with open_store(url) as store:
        assert _present(store, [2, 11]) == []  # the leaks are deleted
        assert _present(store, [3, 4, 55, 90]) == [3, 4, 55, 90]  # everything still referenced is not
