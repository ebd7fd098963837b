"""Each real server answers its real client: the fixtures every later test stands on."""

from __future__ import annotations

import uuid
from pathlib import Path

import boto3
import pulsar
import pytest
from kazoo.client import KazooClient

from tests.support.harness import MotoS3Server, PulsarLiteBroker, ZooKeeperServer


def test_zookeeper_through_kazoo(zookeeper: ZooKeeperServer) -> None:
    client = KazooClient(zookeeper.hosts)
    client.start(5)
    try:
        path = f"/smoke/{uuid.uuid4().hex}"
        client.create(path, b"hello", makepath=True)
        data, stat = client.get(path)
        assert data == b"hello" and stat.version == 0
    finally:
        client.stop()
        client.close()


def test_a_zookeeper_whose_port_another_holds_is_refused_not_taken_for_the_other(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """The harness's readiness asks the server on the port for its ``dataDir``: another suite's
    ZooKeeper on the port chosen must not pass for the one just started (which exits for want of it)."""
    second = ZooKeeperServer(tmp_path / "second")
    with pytest.raises(RuntimeError, match="ZooKeeper"):
        second.start(port=zookeeper.port)
    assert second.proc is not None and second.proc.poll() is not None, "the refused server left running"
    assert zookeeper.serving()


def test_pulsar_lite_through_pulsar_client(pulsar_broker: PulsarLiteBroker) -> None:
    topic = f"persistent://public/default/smoke-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(pulsar_broker.service_url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, "smoke", consumer_type=pulsar.ConsumerType.Shared,
                                    initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False)
        msg_id = producer.send(b"ping", properties={"k": "v"})
        assert msg_id is not None
        msg = consumer.receive(timeout_millis=10_000)
        assert msg.data() == b"ping" and msg.properties() == {"k": "v"}
        consumer.acknowledge(msg)
    finally:
        client.close()
    assert "pulsar_" in pulsar_broker.metrics_text()


def test_moto_server_through_boto3(s3_server: MotoS3Server) -> None:
    s3 = boto3.client("s3", endpoint_url=s3_server.endpoint, region_name="us-east-1")
    bucket = f"smoke-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="k", Body=b"v")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v"
