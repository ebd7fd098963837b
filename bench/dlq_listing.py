"""An unscoped ``dlq list`` over 20, 200 and 2,000 namespaces, mostly empty (the real CLI, the embedded
pulsar-lite broker of a data dir, SQLite metadata, namespace scope).

    python -m bench.dlq_listing [--namespaces 20,200,2000] [--parked-in 3] [--parked 5] [--repeat 3]

Each size is its own data dir: the namespaces exist in the metadata store (a managed ledger each),
``--parked-in`` of them have ``--parked`` requests in their DLQ, the others' DLQs were never
written.  The time printed is the whole ``ledger-deletion --json dlq list`` process, start to exit,
with the data dir's broker already running (seeding is not timed), ``--repeat`` times in a row: the first
listing creates the DLQ topics nobody wrote (pulsar-lite creates a topic a subscriber asks for), the
later ones read topics that exist, as every listing after a deployment's first does.  Figures are
printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from deletion_service.broker.interface import Outgoing
from deletion_service.broker.pulsar_client import PulsarBrokerClient
from deletion_service.cluster_writer import ClusterWriter
from deletion_service.config import DeletionConfig
from deletion_service.embedded.broker import EmbeddedBroker
from deletion_service.protocol.topics import DeletionTopics, namespace_topics
from metastore import open_store

CLUSTER = DeletionTopics.from_config(DeletionConfig())


def _request(namespace: str, ledger_id: int) -> bytes:
    return json.dumps({"topicName": f"persistent://{namespace}/orders", "ledgerComponent": "MANAGED_LEDGER",
                       "ledgerType": "LEDGER", "ledgerId": ledger_id, "markedAt": 1, "reason": "manual"}).encode()


def seed(data_dir: Path, namespaces: list[str], parked_in: list[str], parked: int) -> EmbeddedBroker:
    """The namespaces in the store, requests parked in some DLQs; the data dir's broker, started here."""
    with open_store(f"sqlite:///{data_dir / 'metadata.db'}") as store:
        writer = ClusterWriter(store)
        writer.ensure_layout()
        for ns in namespaces:
            writer.managed_ledger(f"persistent://{ns}/orders", [])
    broker = EmbeddedBroker(data_dir)
    url = broker.ensure().serviceUrl
    client = PulsarBrokerClient(url, long_lived=False)
    try:
        for k, ns in enumerate(parked_in):
            topics = namespace_topics(ns, CLUSTER)
            client.ensure_subscription(topics.dlq, topics.dlq_subscription)
            producer = client.producer(topics.dlq)
            producer.send_many([Outgoing(_request(ns, 1000 * k + n), {"reason": "delete-failed"})
                                for n in range(parked)])
            producer.close()
    finally:
        client.close()
    return broker


def listing(data_dir: Path, config: Path) -> tuple[float, int]:
    """Seconds the whole CLI process took, and the rows it printed."""
    started = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "deletion_service.cli.main", "--data-dir", str(data_dir),
                        "--config", str(config), "--json", "dlq", "list"], capture_output=True, text=True,
                       timeout=3600)
    took = time.monotonic() - started
    if r.returncode != 0:
        raise SystemExit(f"dlq list failed: {r.stderr[-2000:]}")
    return took, len(json.loads(r.stdout))


def main() -> None:
    parser = argparse.ArgumentParser(description="An unscoped dlq list over many namespaces, mostly empty.")
    parser.add_argument("--namespaces", default="20,200,2000", help="sizes, comma-separated")
    parser.add_argument("--parked-in", type=int, default=3, help="namespaces whose DLQ holds requests")
    parser.add_argument("--parked", type=int, default=5, help="requests parked in each of those")
    parser.add_argument("--repeat", type=int, default=3, help="listings in a row on each size")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-dlq-listing-"))
    for size in (int(n) for n in args.namespaces.split(",")):
        data_dir = work / f"n{size}"
        data_dir.mkdir()
        config = work / f"n{size}.toml"
        config.write_text('ledgerDeletionTopicScope = "namespace"\n')
        namespaces = [f"tenant{i // 10}/ns{i % 10}" for i in range(size)]
        step = max(1, size // max(1, args.parked_in))
        broker = seed(data_dir, namespaces, namespaces[::step][:args.parked_in], args.parked)
        try:
            runs = [listing(data_dir, config) for _ in range(args.repeat)]
        finally:
            broker.stop()
        print(f"{size} namespaces ({min(size, args.parked_in)} with {args.parked} parked each): dlq list "
              + ", then ".join(f"{took:.1f} s ({rows} rows)" for took, rows in runs), flush=True)


if __name__ == "__main__":
    main()
