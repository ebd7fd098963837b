"""Stock brokers leak at random while the daemon replicas that watch are killed at random: every leak is
deleted, and nothing else is requested.  Real ZooKeeper, pulsar-lite, ``moto_server`` and two
``ledger-deletion run`` replicas (:mod:`tests.support.leak_scenario`); ``scripts/leak_watcher_soak.py``
runs the same for as long as it is given.  ``LEAK_SEED`` replays a run."""

from __future__ import annotations

import json
import os
import random
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from deletion_service.failpoints import WATCHER_POINTS
from tests.support.deletion_world import S3Bucket
from tests.support.harness import MotoS3Server, PulsarLiteBroker
from tests.support.leak_scenario import LeakScenario
from tests.support.replicas_world import ReplicaWorld

SEED = int(os.environ.get("LEAK_SEED") or random.SystemRandom().randrange(2**31))
SECONDS = float(os.environ.get("LEAK_SECONDS") or 45)


@pytest.fixture
def scenario(tmp_path: Path, zk_url: str, module_pulsar_lite: PulsarLiteBroker,
             s3_server: MotoS3Server) -> Iterator[LeakScenario]:
    world = ReplicaWorld(tmp_path, zk_url, module_pulsar_lite.service_url)
    with world.config.open("a") as config:
        config.write("ledgerDeletionLeakWatcherSettleSeconds = 2\nledgerDeletionLeakWatcherPassSeconds = 1\n")
    bucket = S3Bucket(s3_server.endpoint, f"leaks-{uuid.uuid4().hex[:8]}")
    boto3.client("s3", endpoint_url=s3_server.endpoint, region_name="us-east-1").create_bucket(Bucket=bucket.name)
    yield LeakScenario(world, bucket, SEED)
    world.close()


@pytest.mark.slow
def test_every_leak_is_deleted_and_nothing_else_requested_while_watchers_die(scenario: LeakScenario) -> None:
    print(f"LEAK_SEED={SEED}")
    scenario.start()
    scenario.run(SECONDS, kill_every_s=(6, 12))
    result = scenario.judge()
    print(json.dumps(result))
    why = json.dumps(result, indent=1)
    assert result["leaksInjected"] >= 5, why  # the run exercised the watcher
    assert result["leaksMissed"] == [], why
    assert result["requestedThoughDeletedByBroker"] == [], why
    assert result["liveRequested"] == [] and result["liveMissing"] == [], why
    assert result["wrongRequestsRefusedInUse"] == 0, why
    assert sum(result["kills"].values()) >= 2, why  # the role changed hands during the run
    assert set(result["kills"]) & set(WATCHER_POINTS) or result["kills"].get("now"), why
