"""A data dir (SQLite metadata, embedded broker) with a config, driven only through the real CLI and
the real daemon: what the DLQ tests deploy, publish to and read back."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pulsar

from deletion_service.config import DeletionConfig
from deletion_service.embedded.broker import EmbeddedBroker, pids_serving, stop_pid
from deletion_service.protocol.topics import DeletionTopics
from metastore import open_store
from metastore.formats import ledger_path
from tests.support.cli_runner import CliResult, run_cli
from tests.support.harness import free_port

MARKER = "ledgerDeletionSettled"
CLUSTER = DeletionTopics.from_config(DeletionConfig())


def _short(receipt: object) -> str:
    ledger, entry, _, _ = str(receipt).strip("()").split(",")
    return f"{ledger}:{entry}"


@dataclass
class Deployment:
    """A data dir (SQLite metadata, embedded broker) with a config, driven only through the real CLI."""

    data_dir: Path
    config: Path
    seeder: EmbeddedBroker | None = None  # a broker started here to seed messages (a running one is reused)

    def service_url(self) -> str:
        if self.seeder is None:
            self.seeder = EmbeddedBroker(self.data_dir)
        return self.seeder.ensure().serviceUrl

    def cli(self, *args: str, timeout: float = 120) -> CliResult:
        return run_cli("--data-dir", str(self.data_dir), "--config", str(self.config), *args, timeout=timeout)

    def listed(self, *args: str) -> list[dict]:
        r = self.cli("--json", "dlq", "list", *args)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    def send(self, topic: str, messages: list[tuple[bytes, dict[str, str]]]) -> list[str]:
        """Publish as any producer may (the official client, properties of its choosing), through the
        running embedded broker or a temporary one; returns the ids as ``dlq list`` prints them."""
        client = pulsar.Client(self.service_url(), operation_timeout_seconds=10)
        try:
            producer = client.create_producer(topic, batching_enabled=False)
            return [_short(producer.send(data, properties=props)) for data, props in messages]
        finally:
            client.close()

    def read(self, topic: str) -> list[pulsar.Message]:
        """Every message stored on ``topic`` (a Reader: takes nothing)."""
        client = pulsar.Client(self.service_url(), operation_timeout_seconds=10)
        try:
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            out = []
            while True:
                try:
                    out.append(reader.read_next(1000))
                except pulsar.Timeout:
                    return out
        finally:
            client.close()

    def stop_broker(self) -> None:
        """``run`` owns its broker, and a command that starts its own counts exactly: the seeding one goes."""
        if self.seeder is not None:
            self.seeder.stop()
            self.seeder = None

    def run_until_idle(self) -> str:
        self.stop_broker()
        r = self.cli("run", "--exit-when-idle", "--max-wait", "150", "--admin-address", f"127.0.0.1:{free_port()}",
                     "--log-format", "json", timeout=240)
        assert r.returncode == 0, r.stderr[-3000:]
        return r.stderr

    def daemon(self, port: int) -> subprocess.Popen:
        self.stop_broker()
        return subprocess.Popen([sys.executable, "-m", "deletion_service.cli.main", "--data-dir", str(self.data_dir),
                                 "--config", str(self.config), "run", "--admin-address", f"127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def present(self, *ids: int) -> list[int]:
        with open_store(f"sqlite:///{self.data_dir / 'metadata.db'}") as store:
            return [lid for lid in ids if store.get(ledger_path("/ledgers", lid, "hierarchical")) is not None]


def deployed(tmp_path: Path, config: str) -> Iterator[Deployment]:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    cfg = tmp_path / "config.toml"
    cfg.write_text(config)
    d = Deployment(data_dir, cfg)
    try:
        yield d
    finally:
        d.stop_broker()
        for pid in pids_serving(data_dir.absolute() / "broker" / "db"):
            stop_pid(pid)
