"""Namespace scope: a namespace created while the daemon runs is found between two batches and served.

Real ZooKeeper and pulsar-lite.  The daemon starts with one namespace; a
second one appears in the metadata store afterwards.  Only the daemon's
periodic look (``ledgerDeletionNamespaceRefreshSeconds``) can subscribe to it,
so the request sent on the new namespace's own topic is settled only if that
look ran and subscribed: without it the ledger stays and the wait times out.
"""

from __future__ import annotations

from deletion_service.cluster_writer import pulsar_custom_metadata
from deletion_service.daemon.run import Daemon
from deletion_service.inflight import MetricsBacklog
from deletion_service.protocol.scope import discover
from metastore import open_store
from tests.support.deletion_world import make_world, request
from tests.support.harness import PulsarLiteBroker, wait_until

FIRST = "persistent://acme/orders/payments"
LATER = "persistent://globex/events/clicks"
LEDGER = 7  # the later namespace's trimmed ledger


def _namespaces_served(daemon: Daemon) -> list[str]:
    return sorted(t.namespace for t in daemon.service.served if not t.partitioned)


def test_a_namespace_created_while_running_is_served_and_its_requests_settled(
    zk_url: str, pulsar_broker: PulsarLiteBroker
) -> None:
    with open_store(zk_url) as store:
        world = make_world(store, store, pulsar_broker.service_url, ledgerDeletionTopicScope="namespace",
                           ledgerDeletionNamespaceRefreshSeconds=1)
        world.writer.managed_ledger(FIRST, [100])
        daemon = Daemon(world.service, MetricsBacklog(pulsar_broker.metrics_url), metrics_refresh_s=3600,
                        namespaces=lambda: discover(store))
        daemon.start()
        try:
            assert _namespaces_served(daemon) == ["acme/orders"]
            path = world.writer.bk_ledger(LEDGER, pulsar_custom_metadata(LATER))
            world.writer.managed_ledger(LATER, [200])  # the namespace appears: LEDGER is older than its current one
            wait_until(lambda: _namespaces_served(daemon) == ["acme/orders", "globex/events"], 30,
                       "the daemon to find the new namespace")
            world.service.send_pending_delete(request(LATER, LEDGER))
            wait_until(lambda: store.get(path) is None, 60, "the new namespace's request to be settled")
        finally:
            daemon.stop()
            world.service.broker.close()
