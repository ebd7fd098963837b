"""A data dir whose DLQ holds four parked requests, parked as the daemon parks them (through the
publisher's DLQ producer, their reasons sealed under the metadata store's key); 9 is an undecodable
payload."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deletion_service.broker.publisher import RequestPublisher
from deletion_service.broker.pulsar_client import PulsarBrokerClient
from deletion_service.cluster_writer import ClusterWriter
from deletion_service.config import DeletionConfig
from deletion_service.delete_phase.consumer.copies import DLQ_LAST_ERROR, DLQ_REASON, PARKED_SEAL, RECONSUMETIMES
from deletion_service.delete_phase.rules.seal import ParkedSeal
from deletion_service.dlq.marker import MarkerKey
from deletion_service.embedded.broker import EmbeddedBroker, stop_pid
from deletion_service.protocol.request import PendingDeleteLedgerInfo
from deletion_service.protocol.topics import DeletionTopics
from metastore import open_store
from tests.support.cli_runner import CliResult, run_cli

TOPICS = DeletionTopics.from_config(DeletionConfig())
TOPIC = "persistent://t/ns/dlq"
#: ledger id → why it was parked; 9 is an undecodable payload
PARKED = {1: "delete-failed", 2: "delete-failed", 3: "cannot-verify", 9: "invalid-request"}


@dataclass
class Parked:
    data_dir: Path
    service_url: str
    ids: dict[int, str]  # ledger id → message id as the broker receipted it, L:E

    def cli(self, *args: str) -> CliResult:
        return run_cli(*args, "--data-dir", str(self.data_dir), timeout=60)

    def listed(self, *args: str) -> list[dict]:
        r = self.cli("dlq", "list", "--json", *args)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)


def _short(receipt: str) -> str:
    ledger, entry, _, _ = receipt.strip("()").split(",")
    return f"{ledger}:{entry}"


def as_parked(data: bytes, reason: str, last_error: str, seal: ParkedSeal, dlq: str = TOPICS.dlq) -> dict[str, str]:
    """The properties of a DLQ copy of ``data`` on ``dlq`` as the daemon writes them: reason and last error
    sealed (a listing shows them only then)."""
    return {DLQ_REASON: reason, DLQ_LAST_ERROR: last_error, RECONSUMETIMES: "0",
            PARKED_SEAL: seal.seal(reason, last_error, 0, dlq, data) or ""}


def park(service_url: str, seal: ParkedSeal) -> dict[int, str]:
    """Park requests as the daemon does (through the publisher's DLQ producer)."""
    client = PulsarBrokerClient(service_url)
    publisher = RequestPublisher(client, TOPICS)
    try:
        ids = {}
        for ledger, reason in PARKED.items():
            data = (b"\xff not a request" if ledger == 9 else
                    PendingDeleteLedgerInfo(topicName=TOPIC, ledgerComponent="MANAGED_LEDGER", ledgerType="LEDGER",
                                            ledgerId=ledger, markedAt=1, reason="manual").to_json())
            ids[ledger] = _short(publisher.send_dlq(data, as_parked(data, reason, f"boom {ledger}", seal)))
        return ids
    finally:
        publisher.close()
        client.close()


@pytest.fixture
def parked(tmp_path: Path) -> Iterator[Parked]:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    with open_store(f"sqlite:///{data_dir / 'metadata.db'}") as store:
        ClusterWriter(store).ensure_layout()
        seal = MarkerKey.ensure(store).parked_seal()
    broker = EmbeddedBroker(data_dir)
    info = broker.ensure()
    try:
        yield Parked(data_dir, info.serviceUrl, park(info.serviceUrl, seal))
    finally:
        broker.stop()
        left = EmbeddedBroker(data_dir).read_info()  # one a daemon in a test started
        if left is not None and EmbeddedBroker(data_dir).is_ours_and_alive(left):
            stop_pid(left.pid)
