"""Namespace scope: which namespaces a daemon serves, and the check that keeps each in its lane.

Namespaces are found in the metadata store (Pulsar keeps one node per namespace
under ``/admin/policies`` and, once it has topics, under ``/managed-ledgers``),
not by a pattern subscription: the embedded broker answers one with a lookup
error, and the metadata store is what every deployment has.

The cross-namespace check: whoever may produce to ``t1/ns1``'s deletion topic
may ask only for ``t1/ns1``'s ledgers.  A request read from a namespace's topic
(the broker names the topic, a producer cannot forge it) whose ``topicName`` is
elsewhere is dead-lettered with reason ``cross-namespace`` and never deleted.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from metastore import MetadataStore
from metastore.formats.pulsar_paths import MANAGED_LEDGERS_ROOT

from .topics import DeletionTopics, beside, namespace_of_topic

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
