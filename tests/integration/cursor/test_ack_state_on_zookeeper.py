"""A huge ack state against a real ZooKeeper: persisted within the budget, connection kept, reloaded exactly.

Half a million scattered acks take about 9 MB as ranges, nine times what
ZooKeeper takes in one request (``jute.maxbuffer``, 1 MiB): sent whole, the
server drops the connection and the client sees a connection loss.  The
budget (5 MiB by default) is capped at the store's limit, the longest prefix
that fits is written, and a reload gives exactly that prefix back.
"""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from deletion_service.cursor import Position, persistence
from deletion_service.cursor.ack_budget import PersistBudget
from deletion_service.cursor.epoch_metrics import AckStateMetrics
from metastore import ABSENT, open_store
from metastore.formats import ManagedCursorInfo, MessageRange, cursor_path, encode_cursor

TOPIC = "persistent://t/ns/huge-acks"
SUB = "slow-consumer"
P = Position


@pytest.fixture
def zk_store(zk_url: str):
    with open_store(zk_url) as store:
        yield store


def test_a_huge_ack_state_persists_within_the_budget_and_reloads_to_the_truncated_state(zk_store, caplog) -> None:
    path = cursor_path(TOPIC, SUB)
    node = ManagedCursorInfo(-1, mark_delete=P(40, -1), cursor_properties={"team": "payments"},
                             properties={"producer-1": 17})
    zk_store.put(path, encode_cursor(node), ABSENT)
    stored = persistence.load(zk_store, TOPIC, SUB)
    cursor = persistence.to_cursor(stored)
    for e in range(1, 1_000_000, 2):  # every other entry acked: 500,000 ranges
        cursor.acks.ack(P(40, e))
    full_ranges = cursor.acks.encoded_size()
    assert full_ranges > 8 * zk_store.max_request_bytes

    registry = CollectorRegistry()
    transitions = zk_store.connection.transitions  # connection state changes kazoo reported so far
    with caplog.at_level(logging.WARNING):
        saved = persistence.save(zk_store, stored, cursor, budget=PersistBudget(),
                                 observer=AckStateMetrics("standalone", "t/ns", TOPIC, SUB, registry))
    assert zk_store.connection.transitions == transitions, "ZooKeeper dropped the connection"

    raw = zk_store.get(path)
    assert raw is not None and raw.version == saved.version
    assert len(raw.data) <= zk_store.max_request_bytes - 1024
    kept = saved.info.individual_deleted_messages
    assert 40_000 < len(kept) < 500_000
    assert kept == [MessageRange(P(40, e - 1), P(40, e)) for e in range(1, 2 * len(kept), 2)]  # nearest first

    reloaded = persistence.to_cursor(persistence.load(zk_store, TOPIC, SUB))
    assert reloaded.acks.ranges() == kept
    assert reloaded.mark_delete_position == P(40, -1)
    assert reloaded.acks.is_acked(P(40, 2 * len(kept) - 1)) and not reloaded.acks.is_acked(P(40, 2 * len(kept) + 1))
    again = persistence.load(zk_store, TOPIC, SUB).info
    assert again.cursor_properties == {"team": "payments"} and again.properties == {"producer-1": 17}

    size = registry.get_sample_value("pulsar_cursor_metadata_size_in_memory_bytes",
                                     {"cluster": "standalone", "namespace": "t/ns", "topic": TOPIC,
                                      "subscription": SUB})
    assert size is not None and size > full_ranges
    assert registry.get_sample_value("pulsar_cursor_metadata_max_persist_bytes") == zk_store.max_request_bytes - 1024
    warning = next(r.getMessage() for r in caplog.records if "persist budget" in r.getMessage())
    assert f"{len(kept)} acked ranges" in warning and f"leaving out {500_000 - len(kept)} ranges" in warning
