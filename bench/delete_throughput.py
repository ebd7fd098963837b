"""Delete-phase throughput on a real ZooKeeper and pulsar-lite: batched vs one message at a time.

    python -m bench.delete_throughput [--ledgers 2000]

Prints ledgers deleted per second for each batch size side by side, the
ratio, and how long ``trim`` of a 1,000-ledger topic takes (one metadata
write).  Figures, not assertions: tests never time anything.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path

from deletion_service.broker.pulsar_client import PulsarBrokerClient
from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from deletion_service.config import DeletionConfig
from deletion_service.mark_phase.trim import trim
from deletion_service.protocol.request import PendingDeleteLedgerInfo
from deletion_service.service import LedgerDeletionService
from metastore import open_store
from metastore.formats import Position
from tests.support.harness import PulsarLiteBroker, ZooKeeperServer

TOPIC = "persistent://bench/ns/orders"


def run_delete(zk: ZooKeeperServer, broker_url: str, ledgers: int, batch_size: int) -> float:
    url = f"{zk.url}/bench-{uuid.uuid4().hex[:8]}"
    with open_store(url) as store:
        writer = ClusterWriter(store)
        writer.ensure_layout()
        for lid in range(1, ledgers + 1):
            writer.bk_ledger(lid, pulsar_custom_metadata(TOPIC))
        cfg = DeletionConfig.model_validate(
            {
                "ledgerDeletionTopic": f"persistent://pulsar/system/__b-{uuid.uuid4().hex[:8]}",
                "twoPhaseDeletionLedgerDeletionParallelism": 4,
            }
        )
        client = PulsarBrokerClient(broker_url)
        service = LedgerDeletionService(cfg, store, client)
        done: list = []
        worker = service.start(on_settled=done.append)
        worker.batch_size = batch_size
        now = int(time.time() * 1000)
        for lid in range(1, ledgers + 1):
            service.send_pending_delete(
                PendingDeleteLedgerInfo.model_validate(
                    {
                        "topicName": TOPIC,
                        "ledgerComponent": "MANAGED_LEDGER",
                        "ledgerType": "LEDGER",
                        "ledgerId": lid,
                        "markedAt": now,
                        "reason": "trim",
                    }
                )
            )
        started = time.perf_counter()
        while len(done) < ledgers:
            worker.run_once(0.05)
        elapsed = time.perf_counter() - started
        assert all(s.outcome.value == "deleted" for s in done)
        service.close()
        client.close()
    return ledgers / elapsed


def run_trim(zk: ZooKeeperServer, ledgers: int = 1000) -> tuple[float, int]:
    with open_store(f"{zk.url}/trim-{uuid.uuid4().hex[:8]}") as store:
        writer = ClusterWriter(store)
        writer.managed_ledger(TOPIC, range(1, ledgers + 1))
        writer.cursor(TOPIC, "sub", Position(ledgers, 0))
        started = time.perf_counter()
        result = trim(store, TOPIC, lambda requests: ["sent"] * len(requests), offline=True)
        return time.perf_counter() - started, result.metadata_writes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ledgers", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        zk = ZooKeeperServer(Path(tmp) / "zk").start()
        broker = PulsarLiteBroker(Path(tmp) / "broker").start()
        try:
            batched = run_delete(zk, broker.service_url, args.ledgers, batch_size=100)
            single = run_delete(zk, broker.service_url, args.ledgers, batch_size=1)
            trim_s, writes = run_trim(zk)
        finally:
            broker.stop()
            zk.stop()
    print(f"{'delete phase (ZooKeeper + pulsar-lite)':<44}{'ledgers/s':>12}")
    print(f"{'  batched (100 per batch, multi-op deletes)':<44}{batched:>12.0f}")
    print(f"{'  one message at a time':<44}{single:>12.0f}")
    print(f"{'  ratio batched / single':<44}{batched / single:>12.1f}x")
    print(f"trim of a 1,000-ledger topic: {trim_s * 1000:.0f} ms, {writes} metadata write(s)")


if __name__ == "__main__":
    main()
