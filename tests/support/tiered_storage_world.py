"""A deletion service on the real ZooKeeper and broker whose S3 settings make faults cheap: short S3
timeouts, two retries, probes of a failing target every 2 s (``world``; its param is the reconsume delay)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from deletion_service.delete_phase.storage.breaker import TargetBreakers
from metastore import open_store
from offloaders.allow_list import AllowList
from offloaders.registry import OffloaderSettings
from tests.support.deletion_world import World, make_world
from tests.support.harness import PulsarLiteBroker, ZooKeeperServer

TOPIC = "persistent://t/ns/faulty"


@pytest.fixture
def world(request: pytest.FixtureRequest, zk_url: str, zookeeper: ZooKeeperServer,
          pulsar_broker: PulsarLiteBroker) -> Iterator[World]:
    store = open_store(zk_url)
    bk_store = open_store(f"{zookeeper.url}/bk-{uuid.uuid4().hex[:8]}")
    delay = getattr(request, "param", 0)
    w = make_world(store, bk_store, pulsar_broker.service_url,
                   twoPhaseDeletionReconsumeLaterInSeconds=delay, twoPhaseDeletionMaxRetryDeleteCount=2)
    # Short S3 timeouts so a hanging server costs a second, not a minute.
    w.service.offload = OffloaderSettings(AllowList.of(), s3_connect_timeout=0.5, s3_read_timeout=0.8)
    w.service.gatherer.offload = w.service.executor.offload = w.service.offload
    # Probes of a target that keeps failing back off to 2 s, not 60: a fault the proxy injects ten times
    # over is then outlasted in seconds (63 s at a 60 s bound); held, probed and recovered exactly as in production.
    w.service.gatherer.target_breakers = TargetBreakers(max_probe_every_s=2.0)
    yield w
    w.service.close()
    w.service.broker.close()
    store.close()
    bk_store.close()
