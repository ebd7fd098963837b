"""Daemon replicas as an operator runs them: N ``ledger-deletion run`` processes, each with its own
data dir and admin port, one pulsar-lite broker process, one ZooKeeper.

Shared by ``tests/system/replicas/test_replicas.py`` and ``bench/replicas.py``.  The ledgers are orphans (BookKeeper
znodes no managed ledger lists, ``minLedgerAgeSeconds = 0``), so every request ends ``deleted``
exactly when its znode goes: the judge reads ZooKeeper and the replicas' audit trails itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from deletion_service.failpoints import ENV as FAILPOINTS_ENV
from metastore import open_store
from metastore.formats.ledger_paths import ledger_path
from tests.support.harness import free_port, wait_until
from tests.support.soak.processes import http_ok

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Replica:
    """One ``run`` process; restarted with the same data dir (its audit trail, its lock)."""

    name: str
    data_dir: Path
    argv: list[str]
    env: dict[str, str]
    proc: subprocess.Popen | None = None
    port: int = 0

    def start(self, failpoint: str | None = None, own_group: bool = False) -> Replica:
        """``own_group``: the daemon leads a process group of its own, as a shell's foreground job or a
        systemd unit's processes (a signal to the group reaches its children too)."""
        self.port = free_port()
        env = dict(self.env)
        env.pop(FAILPOINTS_ENV, None)
        if failpoint:
            env[FAILPOINTS_ENV] = failpoint
        log = open(self.data_dir.parent / f"{self.name}.log", "ab")  # noqa: SIM115 - the child's for its life
        self.proc = subprocess.Popen([*self.argv, "run", "--admin-address", f"127.0.0.1:{self.port}"],
                                     stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                     start_new_session=own_group)
        log.close()
        return self

    def ready(self) -> bool:
        return self.running() and http_ok(f"http://127.0.0.1:{self.port}/readyz")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout: float = 90) -> None:
        wait_until(self.ready, timeout, f"replica {self.name}", self.proc, self.data_dir.parent / f"{self.name}.log",
                   interval=0.2)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def audit(self) -> list[dict]:
        records = []
        for path in sorted((self.data_dir / "audit").glob("audit-*.jsonl")):
            records += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return records


@dataclass
class ReplicaWorld:
    """The cluster, its requests and its replicas, in ``root``."""

    root: Path
    zk_url: str
    broker_url: str
    scope: str = "cluster"  # or "namespace"
    partitions: int = 2
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    replicas: list[Replica] = field(default_factory=list)
    ledgers: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.store = open_store(self.zk_url)
        self.writer = ClusterWriter(self.store)
        self.writer.ensure_layout()
        self.topic = f"persistent://r{self.tag}/ns/orders"
        self.writer.managed_ledger(self.topic, [])  # the namespace a namespace-scope daemon discovers
        self.config = self.root / "replicas.toml"
        self.config.write_text(
            f'ledgerDeletionTopicScope = "{self.scope}"\n'
            f'ledgerDeletionTopic = "persistent://pulsar/system/__ld_{self.tag}"\n'
            f"twoPhaseDeletionLedgerDeletionParallelism = {self.partitions}\n"
            "minLedgerAgeSeconds = 0\ntwoPhaseDeletionReconsumeLaterInSeconds = 2\n")

    def argv(self, data_dir: Path) -> list[str]:
        return [sys.executable, "-m", "deletion_service.cli.main", "--metadata-store", self.zk_url,
                "--broker-url", self.broker_url, "--config", str(self.config), "--data-dir", str(data_dir)]

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(ROOT)}

    def add_replicas(self, count: int) -> list[Replica]:
        new = [Replica(f"replica-{len(self.replicas) + k}", self.root / f"data-{len(self.replicas) + k}",
                       self.argv(self.root / f"data-{len(self.replicas) + k}"), self.env()) for k in range(count)]
        self.replicas += new
        return new

    def orphans(self, count: int) -> list[int]:
        """``count`` closed Pulsar ledgers of the topic that no managed ledger lists."""
        first = 10_000 + len(self.ledgers)
        ids = list(range(first, first + count))
        for lid in ids:
            self.writer.bk_ledger(lid, pulsar_custom_metadata(self.topic))
        self.ledgers += ids
        return ids

    def enqueue(self, ids: list[int]) -> None:
        lines = self.root / f"requests-{ids[0]}.jsonl"
        lines.write_text("".join(json.dumps({
            "topicName": self.topic, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER",
            "ledgerId": lid, "reason": "orphan"}) + "\n" for lid in ids))
        out = subprocess.run([*self.argv(self.root / "enqueue-data"), "enqueue", "--from-file", str(lines)],
                             env=self.env(), capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr

    def left(self) -> list[int]:
        root, layout = self.writer.root, self.writer.layout
        return [lid for lid in self.ledgers if self.store.get(ledger_path(root, lid, layout)) is not None]

    def wait_drained(self, timeout: float = 120, recorded_within_s: float = 10) -> None:
        """Every ledger gone from ZooKeeper, then up to ``recorded_within_s`` for the audit trails to
        name each ``deleted``: a delete process deletes a batch before its daemon records it, so a judge
        reading the trails at once could miss the last batch's records (callers assert what they read)."""
        wait_until(lambda: not self.left(), timeout, f"all {len(self.ledgers)} ledgers deleted", interval=0.5)
        deadline = time.monotonic() + recorded_within_s
        while time.monotonic() < deadline and not set(self.ledgers) <= set(self.deletions()):
            time.sleep(0.2)

    def deletions(self) -> Counter:
        """Ledger id → how many ``deleted`` records all replicas' audit trails hold for it."""
        return Counter(r["request"]["ledgerId"] for rep in self.replicas for r in rep.audit()
                       if r["outcome"] == "deleted")

    def shares(self) -> dict[str, int]:
        return {rep.name: sum(1 for r in rep.audit() if r["outcome"] == "deleted") for rep in self.replicas}

    def close(self) -> None:
        for replica in self.replicas:
            replica.stop(signal.SIGKILL if replica.running() else signal.SIGTERM, timeout=10)
        self.store.close()
