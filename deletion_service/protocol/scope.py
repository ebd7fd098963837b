"""Namespace scope: which namespaces a daemon serves, and the check that keeps each in its lane.

Namespaces are found in the metadata store (Pulsar keeps one node per namespace
under ``/admin/policies`` and, once it has topics, under ``/managed-ledgers``),
not by a pattern subscription: the embedded broker answers one with a lookup
error, and the metadata store is what every deployment has.

The cross-namespace check: whoever may produce to ``t1/ns1``'s deletion topic
may ask only for ``t1/ns1``'s ledgers.  A request read from a namespace's topic
(the broker names the topic, a producer cannot forge it) whose ``topicName`` is
elsewhere is dead-lettered with reason ``cross-namespace`` and never deleted.

What an operator's command reads when no ``--namespace`` narrows it is everything a daemon
serves (:func:`everything_served`): the cluster's topics (requests sent before a switch of scope
are drained from them) and, in namespace scope, every namespace's own, found here as the daemon
finds them.  A running daemon answers from what it actually serves (``LedgerDeletionService.served``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from deletion_service.config import DeletionConfig
from deletion_service.protocol.topics import DeletionTopics, beside, namespace_of_topic, namespace_topics
from metastore import MetadataStore
from metastore.formats.pulsar_paths import MANAGED_LEDGERS_ROOT

POLICIES_ROOT = "/admin/policies"


def discover(store: MetadataStore, tenant: str | None = None, namespace: str | None = None) -> list[str]:
    """``tenant/ns`` of every namespace in scope, sorted (``namespace`` wins over ``tenant``)."""
    if namespace is not None:
        return [namespace]
    found: set[str] = set()
    for root in (POLICIES_ROOT, MANAGED_LEDGERS_ROOT):
        tenants = [tenant] if tenant is not None else store.children(root)
        listed = store.children_many([f"{root}/{t}" for t in tenants])
        for path, names in listed.items():
            found.update(f"{path.rsplit('/', 1)[1]}/{name}" for name in names)
    return sorted(found)


def namespace_exists(store: MetadataStore, namespace: str) -> bool:
    """Whether the cluster has ``tenant/ns``, as :func:`discover` finds namespaces (its policies, or
    managed ledgers under it): the namespaces namespace-scope daemons serve."""
    return any(store.exists(f"{root}/{namespace}") for root in (POLICIES_ROOT, MANAGED_LEDGERS_ROOT))


def known_namespaces(store: MetadataStore) -> Callable[[str], bool]:
    """:func:`namespace_exists`, asked once per namespace (a batch of requests names few)."""
    return functools.lru_cache(maxsize=4096)(lambda namespace: namespace_exists(store, namespace))


def cross_namespace(message_topic: str, request_topic: str, cluster: DeletionTopics) -> str | None:
    """Why a request may not be acted on from where it was read, or None (cluster topics: any namespace)."""
    topics = beside(message_topic, cluster)
    if topics is cluster:
        return None
    own, asked = topics.namespace, namespace_of_topic(request_topic)
    if own == asked:
        return None
    return (f"cross-namespace: read from {own}'s deletion topic ({message_topic}) but asks for a ledger of "
            f"{request_topic}, in {asked}: a namespace's topic may only name its own ledgers")


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
