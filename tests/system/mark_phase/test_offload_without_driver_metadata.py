"""An older broker's offload (no driver metadata) through the real CLI and daemon.

Before the fix, trim sent no request for such a ledger whose BookKeeper copy
was already deleted, yet removed it from the list: its offloaded objects were
orphaned.  Now it stays listed and trim says why; with the cluster's offload
settings in the config, its copy is announced and the daemon deletes it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from deletion_service.embedded.broker import EmbeddedBroker, stop_pid
from deletion_service.testing.offload_objects import build_mapfile_data, pulsar_ledger_metadata
from metastore import open_store
from metastore.formats import (
    LedgerInfo,
    OffloadContext,
    Position,
    decode_managed_ledger,
    ledger_path,
    managed_ledger_name,
    managed_ledger_path,
)
from offloaders.filesystem import mapfile_dir_name
from offloaders.interface import java_uuid
from tests.support.cli_runner import run_cli
from tests.support.harness import free_port

TOPIC = "persistent://t/ns/old-offload"
MSB, LSB = 0x4A1B2C3D4E5F4071, -0x6B5A4F3E2D1C0B0A
DAY_MS = 86_400_000


def offload_as_the_filesystem_driver_does(base: Path, ledger_id: int, now_ms: int) -> Path:
    """The MapFile directory upstream's filesystem offloader writes for one ledger."""
    ml = managed_ledger_name(TOPIC)
    d = base / ml / mapfile_dir_name(ledger_id, java_uuid(MSB, LSB))
    d.mkdir(parents=True)
    meta = pulsar_ledger_metadata(ml, entries=100, size=100 * 1024, ctime_ms=now_ms - 3 * DAY_MS)
    (d / "data").write_bytes(build_mapfile_data(meta, [b"entry"] * 3))
    (d / "index").write_bytes(b"")
    return d


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "data"
    d.mkdir()
    yield d
    broker = EmbeddedBroker(d)
    info = broker.read_info()
    if info is not None and broker.is_ours_and_alive(info):
        stop_pid(info.pid)


def test_a_driverless_offload_stays_listed_until_the_cluster_settings_name_it(data_dir: Path) -> None:
    now = int(time.time() * 1000)
    url = f"sqlite:///{data_dir / 'metadata.db'}"
    with open_store(url) as store:
        w = ClusterWriter(store)
        w.ensure_layout()
        w.bk_ledger(2, pulsar_custom_metadata(TOPIC))  # ledger 1's BookKeeper copy went after its offload
        old_offload = OffloadContext(uid_msb=MSB, uid_lsb=LSB, complete=True, bookkeeper_deleted=True, timestamp=now)
        w.managed_ledger(TOPIC, [LedgerInfo(1, 100, 100 * 1024, offload_context=old_offload), LedgerInfo(2, 5, 5),
                                 LedgerInfo(3)])
        w.cursor(TOPIC, "sub", Position(3, 0))
    objects = offload_as_the_filesystem_driver_does(data_dir / "offload", 1, now)
    common = ["--topic", TOPIC, "--offline", "--data-dir", str(data_dir)]

    r = run_cli("trim", "--json", *common)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["picked"], out["removed"], out["aborted"]) == ([1, 2], [2], None)
    assert [k["ledgerId"] for k in out["kept"]] == [1] and "managedLedgerOffloadDriver" in out["kept"][0]["why"]
    people = run_cli("trim", *common, env={"COLUMNS": "400"})
    assert people.returncode == 0, people.stderr
    assert "kept 1" in people.stdout and "managedLedgerOffloadDriver is not set" in people.stdout

    r = run_cli("trim", "--json", *common, "--set", "managedLedgerOffloadDriver=filesystem")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["removed"], out["kept"]) == ([1], [])
    with open_store(url) as store:
        assert decode_managed_ledger(store.get(managed_ledger_path(TOPIC)).data).ledger_ids() == [3]  # type: ignore[union-attr]

    r = run_cli("run", "--exit-when-idle", "--max-wait", "60", "--data-dir", str(data_dir),
                "--admin-address", f"127.0.0.1:{free_port()}", timeout=120)
    assert r.returncode == 0, r.stderr
    assert not objects.exists()  # the offloaded copy was deleted, not orphaned
    with open_store(url) as store:
        assert store.get(ledger_path("/ledgers", 2, "hierarchical")) is None
