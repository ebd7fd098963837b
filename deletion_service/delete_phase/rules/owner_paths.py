"""Where a request's owners live: the metadata node paths of a topic's managed ledger and schema, and back.

The gatherer reads, for every request, the nodes that may still reference its
ledger: the claimed topic's, and the ones BookKeeper's metadata names (a
managed-ledger name, a schema id, a compacted topic).  These turn those names
into node paths, and a node path back into its topic.

Memoized: a batch names a few topics many times over, and parsing a topic name
was a fifth of a request's CPU.  Pure functions of their text, so a cache is safe.
Each raises ``ValueError`` for a name that is not well formed.
"""

from __future__ import annotations

import functools

from metastore.formats import managed_ledger_path, schema_path, topic_from_managed_ledger_name


@functools.lru_cache(maxsize=16_384)
def managed_ledger_path_of_topic(topic: str) -> str:
    return managed_ledger_path(topic)


@functools.lru_cache(maxsize=16_384)
def schema_path_of_topic(topic: str) -> str:
    return schema_path(topic)


@functools.lru_cache(maxsize=16_384)
def managed_ledger_path_of_name(name: str) -> str:
    """The node of the managed ledger named ``name`` (``tenant/ns/persistent/encoded``: ``pulsar/managed-ledger``)."""
    return managed_ledger_path(topic_from_managed_ledger_name(name))


@functools.lru_cache(maxsize=16_384)
def schema_path_of_id(schema_id: str) -> str:
    """The node of the schema ``schema_id`` (``tenant/ns/encoded``, as in ``pulsar/schemaId``)."""
    tenant, namespace, encoded = schema_id.split("/")
    return schema_path(topic_from_managed_ledger_name(f"{tenant}/{namespace}/persistent/{encoded}"))


def topic_of_path(path: str) -> str:
    """The topic a managed-ledger node path names (the path itself when it names none: only for messages)."""
    try:
        return str(topic_from_managed_ledger_name(path.removeprefix("/managed-ledgers/")))
    except ValueError:
        return path

