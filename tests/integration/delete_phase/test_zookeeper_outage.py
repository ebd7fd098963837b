"""A ZooKeeper outage with the real server: consuming pauses, /readyz-style readiness says why, no
retry is spent, and every request is deleted once ZooKeeper is back — without a restart."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from deletion_service.admin.deps import AdminDeps
from deletion_service.cluster_writer import pulsar_custom_metadata
from deletion_service.delete_phase.storage.breaker import PROBE_EVERY_S, Breaker, Breakers
from deletion_service.inflight import NoBacklog
from metastore import open_store
from tests.support.deletion_world import make_world, request
from tests.support.harness import PulsarLiteBroker, ZooKeeperServer, wait_until

TOPIC = "persistent://t/ns/outage"


@pytest.fixture
def own_zookeeper(tmp_path: Path):  # noqa: ANN201 - a server this test may stop and start again
    zk = ZooKeeperServer(tmp_path / "zk").start()
    yield zk
    zk.stop()


def _world(zk: ZooKeeperServer, broker: PulsarLiteBroker, ledgers: int) -> tuple:
    """A service on this test's own ZooKeeper whose retry budget an outage would burn in a second or two."""
    store = open_store(zk.url)
    world = make_world(store, store, broker.service_url,
                       twoPhaseDeletionReconsumeLaterInSeconds=1, twoPhaseDeletionMaxRetryDeleteCount=1)
    ids = range(1, ledgers + 1)
    for lid in ids:
        world.writer.bk_ledger(lid, pulsar_custom_metadata(TOPIC))
    return store, world, ids


def _count_probes(breakers: Breakers) -> list[str]:
    """Each breaker's probe, recording its name whenever it asks its dependency (the real probe runs)."""
    probes: list[str] = []
    for breaker in breakers.breakers:
        def probe(breaker: Breaker = breaker, real: Callable[[], object] = breaker.probe) -> object:
            probes.append(breaker.name)
            return real()
        breaker.probe = probe
    return probes


def test_a_zookeeper_outage_spends_no_retry_and_recovers_without_restart(
        own_zookeeper: ZooKeeperServer, pulsar_broker: PulsarLiteBroker) -> None:
    store, world, ids = _world(own_zookeeper, pulsar_broker, 40)
    worker = world.start()
    probes = _count_probes(worker.breakers)
    readiness = AdminDeps.for_service(world.service, NoBacklog(), None, probe_timeout_s=2.0).readiness
    stop = threading.Event()
    loop = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    try:
        own_zookeeper.stop()  # down before the requests arrive: every one of them meets the outage
        for lid in ids:
            world.service.send_pending_delete(request(TOPIC, lid))
        loop.start()
        wait_until(lambda: worker.in_hand().paused > 0, 60, "requests held through the outage")
        # three more probes, each a second apart (PROBE_EVERY_S) and each finding ZooKeeper down: three
        # reconsume delays, in each of which the held requests would have been retried and dead-lettered
        assert world.service.config.two_phase_deletion_reconsume_later_in_seconds <= PROBE_EVERY_S
        seen = len(probes)
        wait_until(lambda: len(probes) >= seen + 3, 30, "three probes of the store during the outage")
        assert world.settled == [], "nothing is reconsumed, dead-lettered or acked during an outage"
        assert worker.breakers.down() is not None and "the metadata store down" in worker.breakers.down()
        assert readiness()["consuming"] is not None
        assert world.service.metrics.max_retry_reached._value.get() == 0

        own_zookeeper.start()  # the same port and data: the store reconnects on its own
        wait_until(lambda: world.outcomes().get("deleted", 0) == len(ids), 90, "every request deleted")
    finally:
        stop.set()
        loop.join(30)
        world.service.close()
        world.service.broker.close()
    assert {s.outcome.value for s in world.settled} == {"deleted"}, "no RETRY pass, no DLQ"
    assert all(not world.bk_exists(lid) for lid in ids)
    assert worker.breakers.down() is None and readiness()["consuming"] is None
    store.close()


def test_a_per_request_transient_failure_is_still_retried(zk_url: str, zookeeper: ZooKeeperServer,
                                                           pulsar_broker: PulsarLiteBroker) -> None:
    """With every dependency answering, a transient failure was the request's own: reconsumed and counted."""
    store = open_store(zk_url)
    bk_store = open_store(f"{zookeeper.url}/bk-{uuid.uuid4().hex[:8]}")
    world = make_world(store, bk_store, pulsar_broker.service_url, twoPhaseDeletionReconsumeLaterInSeconds=0)
    worker = world.start()
    try:
        original = world.service.gatherer.gather

        def flaky(requests, attempts, grace_since=None):  # noqa: ANN001, ANN202 - one request's facts fail transiently, once
            facts = original(requests, attempts, grace_since)
            if attempts and attempts[0] == 0:
                facts = [replace(facts[0], transient="ZooKeeper said: try again"), *facts[1:]]
            return facts

        world.service.gatherer.gather = flaky  # fault injection: the real store cannot fail one request alone
        world.writer.bk_ledger(7, pulsar_custom_metadata(TOPIC))
        world.service.send_pending_delete(request(TOPIC, 7))
        world.drain(lambda w: w.outcomes().get("deleted", 0) == 1, timeout_s=60)
    finally:
        world.service.close()
        world.service.broker.close()
    assert [s.outcome.value for s in world.settled] == ["reconsumed", "deleted"]
    assert worker.breakers.down() is None and worker.in_hand().paused == 0
    store.close()
    bk_store.close()


def _expire_session(store, hosts: str) -> None:  # noqa: ANN001
    """ZooKeeper's own way to expire a session: another client joins it with its id and password and
    leaves; the server then ends the session for both (what a long GC pause or partition does)."""
    session_id, password = store._client.client_id
    intruder = KazooClient(hosts=hosts, client_id=(session_id, password))
    intruder.start(timeout=10)
    intruder.stop()
    intruder.close()


def test_an_expired_zookeeper_session_is_ridden_out_without_spending_retries(
        own_zookeeper: ZooKeeperServer, pulsar_broker: PulsarLiteBroker) -> None:
    store, world, ids = _world(own_zookeeper, pulsar_broker, 30)
    worker = world.start()
    try:
        old_session = store._client.client_id[0]
        _expire_session(store, own_zookeeper.hosts)
        for lid in ids:
            world.service.send_pending_delete(request(TOPIC, lid))
        world.drain(lambda w: w.outcomes().get("deleted", 0) == len(ids), timeout_s=90)
        assert store._client.client_id[0] != old_session, "the session really expired and was replaced"
    finally:
        world.service.close()
        world.service.broker.close()
    assert {s.outcome.value for s in world.settled} == {"deleted"}, "no retry spent on the expiry"
    assert worker.breakers.down() is None
    store.close()
