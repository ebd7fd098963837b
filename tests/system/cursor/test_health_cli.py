"""``cursor health`` and the ack-state lines of ``inspect cursor``, through the real CLI on real ZooKeeper;
and ``cursor reset`` observed by the epoch metrics."""

from __future__ import annotations

import json

import pytest

from deletion_service.cli.main import main
from deletion_service.cursor.epoch_metrics import REGISTRY
from deletion_service.cursor.health import state_size
from metastore import ABSENT, open_store
from metastore.formats import (
    LedgerInfo,
    ManagedCursorInfo,
    ManagedLedgerInfo,
    MessageRange,
    Position,
    cursor_path,
    encode_cursor,
    encode_managed_ledger,
    managed_ledger_path,
)
from tests.support.cli_runner import run_cli

P = Position
BUDGET = 2048  # bytes: --set managedLedgerMaxAckStateInBytesToPersist


def _acks(count: int) -> list[MessageRange]:
    return [MessageRange(P(7, 2 * i), P(7, 2 * i + 1)) for i in range(count)]


CURSORS = {  # (topic, subscription): node
    ("persistent://acme/orders/payments", "billing"): ManagedCursorInfo(-1, P(7, -1), _acks(3)),
    ("persistent://acme/orders/payments", "audit"): ManagedCursorInfo(-1, P(7, -1), _acks(120)),  # 1.8 kB: near
    ("persistent://acme/logs/app", "slow consumer"): ManagedCursorInfo(-1, P(7, -1), _acks(400)),  # over
    ("persistent://globex/events/clicks", "ingest"): ManagedCursorInfo(31, P(7, -1)),  # in a cursor ledger
}


@pytest.fixture
def seeded(zk_url: str) -> str:
    with open_store(zk_url) as store:
        for (topic, sub), info in CURSORS.items():
            if not store.exists(managed_ledger_path(topic)):
                ml = ManagedLedgerInfo(ledgers=[LedgerInfo(ledger_id=7, entries=1000)])
                store.put(managed_ledger_path(topic), encode_managed_ledger(ml), ABSENT)
            store.put(cursor_path(topic, sub), encode_cursor(info), ABSENT)
        store.put(cursor_path("persistent://globex/events/clicks", "broken"), b"\x08", ABSENT)
    return zk_url


def _health(url: str, *args: str):
    return run_cli("--metadata-store", url, "--set", f"managedLedgerMaxAckStateInBytesToPersist={BUDGET}",
                   "cursor", "health", *args)


def test_health_lists_cursors_near_or_over_the_budget_or_in_a_cursor_ledger(seeded: str) -> None:
    result = _health(seeded, "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["checked"] == 5
    found = {(c["topic"], c["subscription"]): c for c in out["cursors"]}
    assert {k: c["status"] for k, c in found.items()} == {
        ("persistent://acme/orders/payments", "audit"): "near",
        ("persistent://acme/logs/app", "slow consumer"): "over",
        ("persistent://globex/events/clicks", "ingest"): "cursor-ledger",
        ("persistent://globex/events/clicks", "broken"): "undecodable",
    }
    over = found[("persistent://acme/logs/app", "slow consumer")]
    assert over["stateBytes"] == state_size(CURSORS[("persistent://acme/logs/app", "slow consumer")])
    assert over["budgetBytes"] == BUDGET and over["ranges"] == 400
    assert found[("persistent://globex/events/clicks", "ingest")]["cursorsLedgerId"] == 31


def test_health_scopes_by_tenant_or_namespace_and_shows_a_table(seeded: str) -> None:
    tenant = json.loads(_health(seeded, "--tenant", "acme", "--json", "--all").stdout)
    assert {c["subscription"] for c in tenant["cursors"]} == {"billing", "audit", "slow consumer"}
    namespace = json.loads(_health(seeded, "--namespace", "acme/orders", "--json").stdout)
    assert [c["subscription"] for c in namespace["cursors"]] == ["audit"] and namespace["checked"] == 2
    table = _health(seeded, "--namespace", "acme/logs")
    assert table.returncode == 0 and "slow consumer" in table.stdout and "over" in table.stdout
    assert "1 of 1 cursors" in table.stdout


def test_health_refuses_a_bad_scope_in_one_line(seeded: str) -> None:
    _health(seeded, "--tenant", "acme", "--namespace", "acme/orders").assert_one_line_error(2, "not both")
    _health(seeded, "--namespace", "acme/../x").assert_one_line_error(2, "TENANT/NAMESPACE")


def test_inspect_cursor_shows_the_state_size_against_the_budget(seeded: str) -> None:
    path = cursor_path("persistent://acme/logs/app", "slow consumer")
    size = state_size(CURSORS[("persistent://acme/logs/app", "slow consumer")])
    result = run_cli("--metadata-store", seeded, "--set", f"managedLedgerMaxAckStateInBytesToPersist={BUDGET}",
                     "inspect", "cursor", "--path", path, "--json")
    assert result.returncode == 0, result.stderr
    state = json.loads(result.stdout)["ackState"]
    assert state == {"stateBytes": size, "budgetBytes": BUDGET, "ranges": 400, "batchEntries": 0, "overBudget": True}
    table = run_cli("--metadata-store", seeded, "--set", f"managedLedgerMaxAckStateInBytesToPersist={BUDGET}",
                    "inspect", "cursor", "--path", path)
    assert f"{size:,} B of {BUDGET:,} B" in table.stdout and "over budget" in table.stdout
    assert "390 more acked ranges" in table.stdout  # a huge state is summarised, not printed whole


def test_cursor_reset_moves_the_epoch_metrics(seeded: str) -> None:
    """``cursor reset`` attached no epoch observer, so the epoch metrics never moved."""
    labels = {"cluster": "standalone", "namespace": "acme/orders", "topic": "persistent://acme/orders/payments",
              "subscription": "billing"}
    before = REGISTRY.get_sample_value("pulsar_cursor_epoch_increase_count_total", labels) or 0
    code = main(["--metadata-store", seeded, "--json", "cursor", "reset", "--topic",
                 "persistent://acme/orders/payments", "--subscription", "billing", "--position", "7:0"])
    assert code == 0
    assert REGISTRY.get_sample_value("pulsar_cursor_epoch_increase_count_total", labels) == before + 1
    assert REGISTRY.get_sample_value("pulsar_cursor_epoch_increase_task_state", labels) == 0
    assert REGISTRY.get_sample_value("pulsar_cursor_metadata_size_in_memory_bytes", labels) > 0
