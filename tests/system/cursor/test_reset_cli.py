"""``ledger-deletion cursor reset`` through the real CLI (subprocess)."""

from __future__ import annotations

import json

import pytest

from metastore import ABSENT, open_store
from metastore.formats import (
    LedgerInfo,
    ManagedCursorInfo,
    ManagedLedgerInfo,
    MessageRange,
    Position,
    cursor_path,
    decode_cursor,
    encode_cursor,
    encode_managed_ledger,
    managed_ledger_path,
)
from tests.support.cli_runner import run_cli

TOPIC = "persistent://t/ns/orders"


def _seed(url: str, cursors_ledger_id: int = -1) -> None:
    with open_store(url) as store:
        ml = ManagedLedgerInfo(ledgers=[LedgerInfo(ledger_id=i, entries=10) for i in (5, 6, 7)])
        store.put(managed_ledger_path(TOPIC), encode_managed_ledger(ml), ABSENT)
        info = ManagedCursorInfo(cursors_ledger_id=cursors_ledger_id, mark_delete=Position(6, 3),
                                 individual_deleted_messages=[MessageRange(Position(6, 5), Position(6, 6))])
        store.put(cursor_path(TOPIC, "sub"), encode_cursor(info), ABSENT)


def _reset(url: str, *extra: str, position: str = "5:2", sub: str = "sub"):
    return run_cli("--metadata-store", url, "cursor", "reset", "--topic", TOPIC, "--subscription", sub,
                   "--position", position, *extra)


@pytest.mark.parametrize("backend", ["sqlite_url", "zk_url"])
def test_reset_json_persists_and_bumps_the_version(backend: str, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue(backend)
    _seed(url)
    result = _reset(url, "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out == {"topic": TOPIC, "subscription": "sub", "previous": {"ledgerId": 6, "entryId": 4},
                   "position": {"ledgerId": 5, "entryId": 2}, "epoch": 1, "version": 1}
    with open_store(url) as store:
        node = store.get(cursor_path(TOPIC, "sub"))
    info = decode_cursor(node.data)
    assert node.version == 1 and info.mark_delete == Position(5, 1) and info.individual_deleted_messages == []
    again = _reset(url, "--json", position="7:0")
    assert json.loads(again.stdout)["version"] == 2


def test_reset_prints_a_table(sqlite_url: str) -> None:
    _seed(sqlite_url)
    result = _reset(sqlite_url)
    assert result.returncode == 0, result.stderr
    assert "5:2" in result.stdout and "5:1" in result.stdout and "6:4" in result.stdout


def test_missing_cursor_node_is_one_line(sqlite_url: str) -> None:
    _seed(sqlite_url)
    _reset(sqlite_url, sub="nope").assert_one_line_error(1, "no cursor node", "nope")


def test_bad_position_syntax_is_a_usage_error(sqlite_url: str) -> None:
    _seed(sqlite_url)
    _reset(sqlite_url, position="5-2").assert_one_line_error(2, "LEDGER:ENTRY")


def test_cursor_ledger_backed_cursor_is_refused(sqlite_url: str) -> None:
    _seed(sqlite_url, cursors_ledger_id=42)
    _reset(sqlite_url).assert_one_line_error(1, "cursor ledger 42")
    with open_store(sqlite_url) as store:
        assert store.get(cursor_path(TOPIC, "sub")).version == 0  # untouched


def test_position_in_a_trimmed_ledger_is_refused(sqlite_url: str) -> None:
    _seed(sqlite_url)
    _reset(sqlite_url, position="4:0").assert_one_line_error(1, "ledger 4 is not in the managed ledger")
