"""What an operator's command reads when no ``--namespace`` narrows it: everything a daemon serves.

``inflight``, ``dlq list|requeue|purge`` and the admin API's in-flight and DLQ endpoints used to
read the cluster's topics only when unscoped; in namespace scope requests live on each
namespace's own topics, so they answered 0 and "nothing parked" while the daemon's own gauges
counted every namespace (issue 27, finding 11).  Unscoped now means what an unrestricted daemon
serves: the cluster's topics (requests sent before a switch of scope are drained from them) and,
in namespace scope, every namespace's, found in the metadata store as the daemon finds them.
A running daemon answers from what it actually serves (``LedgerDeletionService.served``).
"""

from __future__ import annotations

from deletion_service.config import DeletionConfig
from deletion_service.namespaces import discover
from deletion_service.topics import DeletionTopics, namespace_topics
from metastore.interface import MetadataStore


def everything_served(config: DeletionConfig, store: MetadataStore, cluster: DeletionTopics) -> list[DeletionTopics]:
    """The cluster's topics, then (namespace scope) every namespace's own, sorted by namespace."""
    if config.ledger_deletion_topic_scope != "namespace":
        return [cluster]
    # The cluster topic's own namespace (``pulsar/system``) has the cluster's topics as its own: once.
    every: dict[str, DeletionTopics] = {cluster.base: cluster}
    for ns in discover(store):
        topics = namespace_topics(ns, cluster)
        every.setdefault(topics.base, topics)
    return list(every.values())


def consumed(scope: list[DeletionTopics]) -> list[str]:
    """Every request and RETRY topic of ``scope`` (what the in-flight estimate sums)."""
    return [t for topics in scope for t in topics.consumed]
