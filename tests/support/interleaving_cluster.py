"""Pieces the interleaving tests build their clusters from: ledger ids handed out in order, an S3 bucket
with one boto3 client for the whole run, and a reader of the requests nobody acked."""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass, field

import boto3
import pulsar

from tests.support.deletion_world import S3Bucket


@dataclass
class Ids:
    """Ledger ids handed out in order, like BookKeeper's id generator."""

    next_id: int = 100
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self) -> int:
        with self.lock:
            self.next_id += 1
            return self.next_id


@dataclass
class Bucket(S3Bucket):
    """``S3Bucket`` with one boto3 client for the whole run (it makes a new one per call: slow here)."""

    @functools.cached_property
    def client(self):  # noqa: ANN201 - boto3's client type is generated at run time
        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1")


def read_all(broker_url: str, topics: list[str], subscription: str, timeout_ms: int = 1500) -> list[pulsar.Message]:
    """Our own consumer (the daemon's are closed): whatever it receives was never acked."""
    quiet = logging.getLogger("safety-test.pulsar-client")
    quiet.setLevel(logging.WARNING)
    client = pulsar.Client(broker_url, logger=quiet)
    try:
        consumer = client.subscribe(topics, subscription, consumer_type=pulsar.ConsumerType.Shared,
                                    initial_position=pulsar.InitialPosition.Earliest)
        out = []
        while True:
            try:
                out.append(consumer.receive(timeout_millis=timeout_ms))
            except pulsar.Timeout:
                return out
    finally:
        client.close()
