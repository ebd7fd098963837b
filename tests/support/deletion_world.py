"""Build a cluster state with real stores and an S3 server, and a deletion service over it.

Shared by the delete-phase tests: metadata in ZooKeeper (or SQLite),
BookKeeper's ledger znodes in their own chroot as on a real cluster, offloaded
objects in a moto_server bucket in upstream's object formats.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import boto3
import pulsar

from deletion_service.broker.pulsar_client import PulsarBrokerClient
from deletion_service.cluster_writer import ClusterWriter
from deletion_service.config import DeletionConfig
from deletion_service.delete_phase.consumer.worker import DeletePhaseWorker, Settled
from deletion_service.protocol.request import PendingDeleteLedgerInfo
from deletion_service.service import LedgerDeletionService
from deletion_service.testing.offload_objects import (
    build_index_v1,
    build_index_v2,
    encode_ledger_info,
    pulsar_ledger_metadata,
)
from metastore.formats import managed_ledger_name
from metastore.interface import MetadataStore
from offloaders.interface import OffloadTarget, SegmentRef, java_uuid

UPSTREAM_META = {"s3managedledgeroffloaderformatversion": "1"}
DAY_MS = 86_400_000


def now_ms() -> int:
    return int(time.time() * 1000)


def request(
    topic: str, ledger_id: int, component: str = "MANAGED_LEDGER", reason: str = "trim", **extra: object
) -> PendingDeleteLedgerInfo:
    return PendingDeleteLedgerInfo.model_validate(
        {
            "topicName": topic,
            "ledgerComponent": component,
            "ledgerType": "LEDGER",
            "ledgerId": ledger_id,
            "markedAt": now_ms(),
            "reason": reason,
            **extra,
        }
    )


@dataclass
class S3Bucket:
    endpoint: str
    name: str

    @property
    def client(self):  # noqa: ANN201
        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1")

    def keys(self) -> set[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.name)
        return {o["Key"] for page in pages for o in page.get("Contents", [])}

    def offload_context(self, msb: int, lsb: int, segments: list[tuple[int, int]] | None = None) -> dict:
        return {
            "uidMsb": msb,
            "uidLsb": lsb,
            "driverName": "aws-s3",
            "driverMetadata": {"bucket": self.name, "region": "us-east-1", "serviceEndpoint": self.endpoint},
            "segments": [{"uidMsb": a, "uidLsb": b} for a, b in segments or []],
        }

    def offload_ledger(
        self, topic: str, ledger_id: int, msb: int, lsb: int, index_topic: str | None = None
    ) -> list[str]:
        """Upload a per-ledger offload (data + index) as Pulsar's offloader writes it."""
        u = java_uuid(msb, lsb)
        ml = managed_ledger_name(index_topic or topic)
        index = build_index_v1(pulsar_ledger_metadata(ml, entries=10, size=1024, ctime_ms=now_ms() - 2 * DAY_MS))
        names = [f"{u}-ledger-{ledger_id}", f"{u}-ledger-{ledger_id}-index"]
        self.client.put_object(Bucket=self.name, Key=names[0], Body=b"entries", Metadata=UPSTREAM_META)
        self.client.put_object(Bucket=self.name, Key=names[1], Body=index, Metadata=UPSTREAM_META)
        return names

    def offload_segment(self, ledger_id: int, msb: int, lsb: int, topic: str | None = None) -> list[str]:
        """A streaming-offload segment; with ``topic``, stamped with upstream's ``ManagedLedgerName``
        metadata (the only thing that says whose segment it is)."""
        seg = SegmentRef(msb, lsb).uuid
        meta = {**UPSTREAM_META, **({"managedledgername": managed_ledger_name(topic)} if topic else {})}
        self.client.put_object(Bucket=self.name, Key=seg, Body=b"segment", Metadata=meta)
        self.client.put_object(
            Bucket=self.name,
            Key=f"{seg}-index",
            Body=build_index_v2({ledger_id: encode_ledger_info(ledger_id, 10, 1024)}),
            Metadata=meta,
        )
        return [seg, f"{seg}-index"]


@dataclass
class World:
    """A deletion service, its worker, and a tally of how each request ended."""

    service: LedgerDeletionService
    writer: ClusterWriter
    store: MetadataStore
    bk_store: MetadataStore
    settled: list[Settled] = field(default_factory=list)
    worker: DeletePhaseWorker | None = None

    def start(self) -> DeletePhaseWorker:
        self.worker = self.service.start(on_settled=self.settled.append)
        return self.worker

    def outcomes(self) -> Counter:
        return Counter(s.outcome.value for s in self.settled if s.outcome.value != "reconsumed")

    def drain(self, until: Callable[[World], bool], timeout_s: float = 120) -> None:
        assert self.worker is not None
        deadline = time.monotonic() + timeout_s
        while not until(self):
            assert time.monotonic() < deadline, f"not done in {timeout_s}s: {self.outcomes()}"
            self.worker.run_once(0.2)

    def bk_exists(self, ledger_id: int) -> bool:
        from metastore.formats import ledger_path

        return self.bk_store.get(ledger_path("/ledgers", ledger_id, self.writer.layout)) is not None


def read_dlq(world: World, broker_url: str) -> list[pulsar.Message]:
    """Everything parked in the world's DLQ, read through its own subscription (a separate client)."""
    client = pulsar.Client(broker_url)
    try:
        consumer = client.subscribe(
            world.service.topics.dlq,
            world.service.topics.dlq_subscription,
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        out = []
        while True:
            try:
                out.append(consumer.receive(timeout_millis=1500))
            except pulsar.Timeout:
                return out
    finally:
        client.close()


def make_world(store: MetadataStore, bk_store: MetadataStore, broker_url: str, **config: object) -> World:
    cfg = DeletionConfig.model_validate(
        {
            "ledgerDeletionTopic": f"persistent://pulsar/system/__ld-{uuid.uuid4().hex[:10]}",
            "twoPhaseDeletionLedgerDeletionParallelism": 2,
            **config,
        }
    )
    broker = PulsarBrokerClient(broker_url)
    service = LedgerDeletionService(cfg, store, broker, bookkeeper_store=bk_store)
    writer = ClusterWriter(store, bk_store)
    writer.ensure_layout()
    return World(service, writer, store, bk_store)


#: Messages no decoder accepts: what a daemon must dead-letter (the DLQ alerts' and gauges' tests).
GARBAGE = [b"{not json", b"\xff\xfe\x00", b'{"topicName": "persistent://t/ns/x"}']


def send_raw(service_url: str, topic: str, payloads: list[bytes]) -> None:
    """Publish bytes as they are, unbatched, with the official client (a producer we do not control)."""
    client = pulsar.Client(service_url, operation_timeout_seconds=10)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for payload in payloads:
            producer.send(payload)
    finally:
        client.close()


__all__ = ["GARBAGE", "OffloadTarget", "S3Bucket", "World", "make_world", "read_dlq", "request", "send_raw"]
