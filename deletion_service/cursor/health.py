"""Cursor health: which subscriptions' persisted state is near or over the persist budget.

An operator's question before an upgrade or after a slow consumer: "which
cursors will lose acks on the next restart?"  A cursor is flagged when its
state (the node's protobuf, uncompressed: what the budget counts) is at least
:data:`NEAR` of the budget, and separately when its state lives in a
BookKeeper cursor ledger, where this tool can see neither its size nor its
acks (the node is only a snapshot).  Read-only: nodes are listed and read in
batches (``children_many``/``get_many``), never written.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from metastore import MetadataStore
from metastore.formats import FormatError, decode_cursor, topic_from_managed_ledger_path
from metastore.formats.cursor_info import ManagedCursorInfo, cursor_to_proto
from metastore.formats.pulsar_paths import MANAGED_LEDGERS_ROOT, url_decode

from .ack_budget import PersistBudget

#: The share of the budget from which a cursor is reported as near it.
NEAR = 0.8


class Status(StrEnum):
    OK = "ok"
    NEAR = "near"
    OVER = "over"
    CURSOR_LEDGER = "cursor-ledger"
    UNDECODABLE = "undecodable"


@dataclass(frozen=True)
class CursorHealth:
    topic: str
    subscription: str
    path: str
    node_bytes: int  # as stored (after compression, if any)
    state_bytes: int  # the uncompressed protobuf: what the budget counts
    budget: int
    ranges: int
    batch_entries: int
    cursor_ledger: int | None
    status: Status
    detail: str = ""

    @property
    def share(self) -> float:
        return self.state_bytes / self.budget if self.budget else 0.0


def state_size(info: ManagedCursorInfo) -> int:
    """Bytes the budget counts for a node: its protobuf without the compression envelope."""
    return len(cursor_to_proto(info))


def effective_budget(budget: PersistBudget, store: MetadataStore | None) -> int:
    return budget.capped(store.max_request_bytes).max_bytes if store is not None else budget.max_bytes


def classify(state_bytes: int, budget: int, cursor_ledger: int | None) -> Status:
    if cursor_ledger is not None:
        return Status.CURSOR_LEDGER
    if state_bytes > budget:
        return Status.OVER
    return Status.NEAR if state_bytes >= NEAR * budget else Status.OK


def _children(store: MetadataStore, parents: Iterable[str]) -> list[str]:
    return [f"{parent}/{child}" for parent, kids in store.children_many(list(parents)).items() for child in kids]


def managed_ledger_paths(store: MetadataStore, tenant: str | None = None, namespace: str | None = None) -> list[str]:
    """Every topic's managed-ledger node under the scope (``namespace`` is ``tenant/ns``)."""
    if namespace is not None:
        namespaces = [f"{MANAGED_LEDGERS_ROOT}/{namespace}"]
    else:
        tenants = [f"{MANAGED_LEDGERS_ROOT}/{tenant}"] if tenant else _children(store, [MANAGED_LEDGERS_ROOT])
        namespaces = _children(store, tenants)
    return sorted(_children(store, (f"{ns}/persistent" for ns in namespaces)))


def check(store: MetadataStore, budget: PersistBudget, tenant: str | None = None,
          namespace: str | None = None) -> list[CursorHealth]:
    """The health of every cursor in scope, sorted by topic and subscription."""
    limit = effective_budget(budget, store)
    cursor_paths = _children(store, managed_ledger_paths(store, tenant, namespace))
    out = []
    for path, node in sorted(store.get_many(cursor_paths).items()):
        if node is None:
            continue  # deleted between the listing and the read
        ml_path, _, name = path.rpartition("/")
        subscription = url_decode(name)
        try:
            topic = str(topic_from_managed_ledger_path(ml_path))
        except ValueError:
            topic = ml_path  # not a topic's name: reported under its path
        try:
            info = decode_cursor(node.data)
        except FormatError as e:
            out.append(CursorHealth(topic, subscription, path, len(node.data), 0, limit, 0, 0, None,
                                    Status.UNDECODABLE, str(e)))
            continue
        size = state_size(info)
        ledger = None if info.state_in_metadata_store else info.cursors_ledger_id
        out.append(CursorHealth(topic, subscription, path, len(node.data), size, limit,
                                len(info.individual_deleted_messages), len(info.batched_entry_deletion_index_info),
                                ledger, classify(size, limit, ledger)))
    return out
