"""Whether a tenant, namespace or topic an operator typed exists in the metadata store, and the
closest name that does.

A scope that exists nowhere is a typo until proven otherwise: ``cursor health --tenant nobody``
must not answer "all 0 cursors are fine", and ``enqueue`` for a topic nobody has must not look
like any other send.  A namespace exists when Pulsar has its policies (``/admin/policies``) or
its topics (``/managed-ledgers``), as :func:`deletion_service.protocol.scope.discover` reads them.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from deletion_service.errors import UserError
from deletion_service.protocol.scope import discover
from metastore.formats import managed_ledger_path, parse_topic
from metastore.formats.pulsar_paths import MANAGED_LEDGERS_ROOT, url_decode
from metastore.interface import MetadataStore


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """`` (did you mean X?)`` for the closest candidate, or nothing when none is close."""
    close = difflib.get_close_matches(name, sorted(set(candidates)), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def check_scope(store: MetadataStore, tenant: str | None, namespace: str | None) -> None:
    """Refuse a ``--tenant`` or ``--namespace`` that exists nowhere in ``store``."""
    if tenant is None and namespace is None:
        return
    known = discover(store)
    if namespace is not None and namespace not in known:
        raise UserError(f"namespace {namespace} exists nowhere in the metadata store: no policies and no "
                        f"topics{did_you_mean(namespace, known)}")
    tenants = {ns.split("/", 1)[0] for ns in known}
    if tenant is not None and tenant not in tenants:
        raise UserError(f"tenant {tenant} exists nowhere in the metadata store: no namespaces and no "
                        f"topics{did_you_mean(tenant, tenants)}")


def missing_topic(store: MetadataStore, topic: str) -> str | None:
    """None when ``topic`` has a managed ledger in ``store``; else one sentence saying it has none,
    with the closest topic of its namespace (or the closest namespace, when that has none either)."""
    if store.exists(managed_ledger_path(topic)):
        return None
    name = parse_topic(topic)
    namespace = f"{name.tenant}/{name.namespace}"
    here = store.children(f"{MANAGED_LEDGERS_ROOT}/{namespace}/persistent")
    if here:
        topics = [f"persistent://{namespace}/{url_decode(t)}" for t in here]
        return f"topic {topic} has no managed ledger in the metadata store{did_you_mean(topic, topics)}"
    known = discover(store)
    if namespace in known:
        return f"topic {topic} has no managed ledger in the metadata store (namespace {namespace} has no topics)"
    return f"topic {topic} has no managed ledger: namespace {namespace} exists nowhere{did_you_mean(namespace, known)}"
