"""``dlq purge`` by id, five in a row, on a DLQ that holds settlement markers (real ZooKeeper, pulsar-lite).

    python -m bench.dlq_purge

Every purge or requeue re-acks the DLQ's markers in case a crash left one unacked.  Those already
acked are never dispatched again; waiting for each cost ``ACK_WAIT_S`` (2 s) per DLQ per command
(measured here before: 0.01 2.01 2.01 2.01 2.01 s).  Figures are printed, never asserted.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path

import pulsar

from deletion_service.broker.pulsar_client import PulsarBrokerClient
from deletion_service.dlq import operations as dlq
from deletion_service.dlq.marker import MarkerKey
from deletion_service.protocol.topics import DeletionTopics
from metastore import open_store
from tests.support.deletion_world import request
from tests.support.harness import PulsarLiteBroker, ZooKeeperServer

PARKED = 6
PURGES = 5


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-dlq-"))
    zookeeper = ZooKeeperServer(work / "zk").start()
    broker_process = PulsarLiteBroker(work / "broker").start()
    try:
        with open_store(zookeeper.url) as store:
            key = MarkerKey.ensure(store)
        topics = DeletionTopics(f"persistent://pulsar/system/__ld-{uuid.uuid4().hex[:8]}", 1)
        client = pulsar.Client(broker_process.service_url)
        broker = PulsarBrokerClient(broker_process.service_url)
        try:
            client.subscribe(topics.dlq, topics.dlq_subscription, consumer_type=pulsar.ConsumerType.Shared,
                             initial_position=pulsar.InitialPosition.Earliest).close()
            producer = client.create_producer(topics.dlq)
            for ledger_id in range(100, 100 + PARKED):
                producer.send(request("persistent://t/ns/x", ledger_id).to_json(), properties={"reason": "x"})
            times = []
            for _ in range(PURGES):
                first = dlq.list_dlq(broker, [topics], key)[0].message_id
                started = time.monotonic()
                dlq.purge(broker, [topics], key, dlq.Selection(message_ids=frozenset({first})))
                times.append(time.monotonic() - started)
        finally:
            broker.close()
            client.close()
        print(f"purge by id, {PURGES} in a row (s):", " ".join(f"{t:.2f}" for t in times))
    finally:
        broker_process.stop()
        zookeeper.stop()


if __name__ == "__main__":
    main()
