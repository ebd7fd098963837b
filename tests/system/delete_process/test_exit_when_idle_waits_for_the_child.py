"""The delete process, driven from outside, with ``run --exit-when-idle`` on a ZooKeeper store and the embedded
broker (as the issue's benchmark runs it): the daemon must not call itself idle while its child holds a
batch, and must leave neither the child nor its broker behind.

Real processes: the CLI on the session's ZooKeeper (a chroot per test), its own embedded pulsar-lite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from deletion_service.failpoints import ENV as FAILPOINTS_ENV
from metastore import open_store
from metastore.formats.ledger_paths import ledger_path
from tests.support.delete_process_world import children_of, gone
from tests.support.harness import free_port
from tests.support.replicas_world import ROOT
from tests.support.soak.processes import leaked_processes


def _cli(tmp_path: Path, zk_url: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "deletion_service.cli.main", "--metadata-store", zk_url, "--data-dir",
            str(tmp_path / "data"), *args]


def test_exit_when_idle_waits_for_the_batch_the_child_holds_and_leaves_nothing(tmp_path: Path, zk_url: str) -> None:
    store = open_store(zk_url)
    writer = ClusterWriter(store)
    writer.ensure_layout()
    topic = "persistent://idle/ns/orders"
    writer.managed_ledger(topic, [])
    ids = list(range(10_000, 10_040))
    for lid in ids:
        writer.bk_ledger(lid, pulsar_custom_metadata(topic))
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps({
        "topicName": topic, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER", "ledgerId": lid,
        "reason": "orphan"}) + "\n" for lid in ids))
    (tmp_path / "c.toml").write_text("minLedgerAgeSeconds = 0\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    sent = subprocess.run(_cli(tmp_path, zk_url, "--config", str(tmp_path / "c.toml"), "enqueue", "--from-file",
                               str(tmp_path / "requests.jsonl")), env=env, capture_output=True, text=True, timeout=120)
    assert sent.returncode == 0, sent.stderr
    daemon = subprocess.Popen(_cli(tmp_path, zk_url, "--config", str(tmp_path / "c.toml"), "run", "--exit-when-idle",
                                   "--max-wait", "60", "--admin-address", f"127.0.0.1:{free_port()}"),
                              env={**env, FAILPOINTS_ENV: "delete.before-storage=sleep:3@1"},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen: set[int] = set()
    try:
        while daemon.poll() is None:
            seen.update(children_of(daemon.pid))
            time.sleep(0.05)
        out = daemon.communicate(timeout=10)[0].decode(errors="replace")
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(10)
    try:
        left = [lid for lid in ids if store.get(ledger_path(writer.root, lid, writer.layout)) is not None]
    finally:
        store.close()
    assert daemon.returncode == 0, out[-3000:]
    assert "decided in the delete process" in out, out[-3000:]
    assert left == [], (len(left), out[-3000:])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(gone(pid) for pid in seen):
        time.sleep(0.1)
    assert all(gone(pid) for pid in seen), [pid for pid in seen if not gone(pid)]
    assert not leaked_processes(tmp_path, set()), leaked_processes(tmp_path, set())
