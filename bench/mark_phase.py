"""Mark-phase throughput on a real ZooKeeper and pulsar-lite: trim many topics, pipelined sends.

    python -m bench.mark_phase [--ledgers 10000] [--topics 100] [--json]

Seeds ``topics`` managed ledgers of ``ledgers / topics`` ledgers each, every one
with a cursor past its last ledger so trim picks them all (not timed), then
times ``trim`` of every topic (``offline=True``) with the real publisher's
pipelined ``send_requests``.  Prints ledgers marked per second and the metadata
writes per topic (trim's one multi-op: "per batch").  Figures, not assertions:
tests never time anything.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from deletion_service import logs
from deletion_service.broker.publisher import RequestPublisher
from deletion_service.broker.pulsar_client import PulsarBrokerClient
from deletion_service.cluster_writer import ClusterWriter
from deletion_service.config import DeletionConfig
from deletion_service.mark_phase.trim import trim
from deletion_service.protocol.topics import DeletionTopics
from metastore import MetadataStore, open_store
from metastore.formats import Position
from tests.support.harness import PulsarLiteBroker, ZooKeeperServer


def seed(store: MetadataStore, ledgers: int, topics: int) -> list[str]:
    """``topics`` managed ledgers sharing ``ledgers`` ids, each with a cursor past all of them, so
    every one is wholly consumed and picked.  Each topic also lists a current ledger after those
    (the cursor sits in it): trim never removes the ledger a topic writes to, so without it the
    last seeded ledger of every topic would stay and the figure would count 99 of 100."""
    per_topic = max(1, ledgers // topics)
    writer = ClusterWriter(store)
    names = []
    for t in range(topics):
        topic = f"persistent://bench/mark/topic-{t}"
        first = 1 + t * per_topic
        current = 10 * ledgers + t + 1  # an id no seeded ledger has
        writer.managed_ledger(topic, [*range(first, first + per_topic), current])
        writer.cursor(topic, "sub", Position(current, 0))
        names.append(topic)
    return names


def run_mark_phase(zk_url: str, broker_url: str, ledgers: int, topics: int, concurrency: int = 1) -> dict:
    """Seed, then time trim of every topic; servers are the caller's (a combined bench reuses its own).

    The publisher's producers and subscriptions are created before the clock starts: that first
    contact is a handful of round trips per run, not per ledger.  Configure logging as the CLI
    does first (``logs.configure(logging.WARNING)``, as :func:`main` does): with library chatter
    on, every pulsar-client log line costs a trip into Python (see ``pulsar_client._client_logger``)."""
    client = PulsarBrokerClient(broker_url)
    cfg = DeletionConfig.model_validate({"ledgerDeletionTopic": f"persistent://pulsar/system/__mark-{uuid.uuid4().hex[:8]}"})
    topic_names = DeletionTopics.from_config(cfg)
    publisher = RequestPublisher(client, topic_names)
    try:
        with open_store(f"{zk_url}/mark-{uuid.uuid4().hex[:8]}") as store:
            names = seed(store, ledgers, topics)
            publisher.prepare(*topic_names.partition_topics)
            started = time.perf_counter()
            with ThreadPoolExecutor(concurrency) as pool:
                results = list(pool.map(lambda name: trim(store, name, publisher.send_requests, offline=True), names))
            seconds = time.perf_counter() - started
    finally:
        publisher.close()
        client.close()
    removed = sum(len(r.removed) for r in results)
    writes = sum(r.metadata_writes for r in results)
    failures = [f"{r.topic}: picked {len(r.picked)}, removed {len(r.removed)}, not sent {len(r.not_sent)}, "
                f"aborted {r.aborted}" for r in results if r.removed != r.picked or r.aborted]
    if failures:
        raise RuntimeError("trim did not remove every picked ledger: " + "; ".join(failures[:3]))
    return {"ledgersPerSecond": removed / seconds, "metadataWritesPerBatch": writes / len(names),
            "metadataWrites": writes, "ledgers": removed, "topics": len(names), "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ledgers", type=int, default=10_000)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args()
    logs.configure(logging.WARNING)  # as the CLI runs trim: library chatter off
    with tempfile.TemporaryDirectory() as tmp:
        zk = ZooKeeperServer(Path(tmp) / "zk").start()
        try:
            broker = PulsarLiteBroker(Path(tmp) / "broker").start()
            try:
                figures = run_mark_phase(zk.url, broker.service_url, args.ledgers, args.topics, args.concurrency)
            finally:
                broker.stop()
        finally:
            zk.stop()
    if args.json:
        print(json.dumps({k: figures[k] for k in ("ledgersPerSecond", "metadataWritesPerBatch", "ledgers",
                                                  "topics", "seconds")}))
        return
    print(f"{'mark phase (ZooKeeper + pulsar-lite)':<44}{'':>12}")
    print(f"{'  ledgers marked':<44}{figures['ledgers']:>12}")
    print(f"{'  topics':<44}{figures['topics']:>12}")
    print(f"{'  seconds':<44}{figures['seconds']:>12.2f}")
    print(f"{'  ledgers/s':<44}{figures['ledgersPerSecond']:>12.0f}")
    print(f"{'  metadata writes':<44}{figures['metadataWrites']:>12}")
    print(f"{'  metadata writes per topic (per batch)':<44}{figures['metadataWritesPerBatch']:>12.2f}")


if __name__ == "__main__":
    main()
