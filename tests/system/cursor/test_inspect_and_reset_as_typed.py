"""``inspect`` and ``cursor reset`` as operators type them: --topic beside --path, a ledger id
found through the store's LAYOUT, refusals of nodes of the wrong kind, ``-t``/``-s``,
``--position earliest|latest`` and ``--dry-run`` — through the real CLI, on SQLite and ZooKeeper."""

from __future__ import annotations

import json

import pytest

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from metastore import ABSENT, open_store
from metastore.formats import (
    LedgerInfo,
    ManagedCursorInfo,
    ManagedLedgerInfo,
    Position,
    cursor_path,
    decode_cursor,
    encode_cursor,
    encode_managed_ledger,
    managed_ledger_path,
)
from tests.support.cli_runner import CliResult, run_cli

TOPIC = "persistent://t/ns/orders"


def _seed(url: str) -> None:
    with open_store(url) as store:
        ml = ManagedLedgerInfo(ledgers=[LedgerInfo(ledger_id=i, entries=10) for i in (5, 6, 7)])
        store.put(managed_ledger_path(TOPIC), encode_managed_ledger(ml), ABSENT)
        info = ManagedCursorInfo(cursors_ledger_id=-1, mark_delete=Position(6, 3))
        store.put(cursor_path(TOPIC, "sub"), encode_cursor(info), ABSENT)
        store.put("/empty", b"", ABSENT)
        writer = ClusterWriter(store)
        writer.ensure_layout()
        writer.bk_ledger(3_000_000_000, pulsar_custom_metadata(TOPIC))  # past 2^31-1: the long form of the path


def _cli(url: str, *args: str) -> CliResult:
    return run_cli("--metadata-store", url, *args)


@pytest.mark.parametrize("backend", ["sqlite_url", "zk_url"])
def test_inspect_by_topic_and_by_ledger_id(backend: str, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue(backend)
    _seed(url)
    ml = _cli(url, "inspect", "managed-ledger", "-t", TOPIC, "--json")
    assert ml.returncode == 0, ml.stderr
    assert [entry["ledgerId"] for entry in json.loads(ml.stdout)["ledgers"]] == [5, 6, 7]
    cur = _cli(url, "inspect", "cursor", "--topic", TOPIC, "-s", "sub", "--json")
    assert cur.returncode == 0, cur.stderr
    assert json.loads(cur.stdout)["markDeletePosition"] == {"ledgerId": 6, "entryId": 3}
    bk = _cli(url, "inspect", "bk-ledger", "3000000000", "--json")
    assert bk.returncode == 0, bk.stderr
    assert json.loads(bk.stdout)["customMetadata"]["pulsar/managed-ledger"] == "t/ns/persistent/orders"
    _cli(url, "inspect", "bk-ledger", "42").assert_one_line_error(1, "no node at /ledgers/00/0000/L0042")


def test_inspect_refuses_what_is_not_the_asked_kind(sqlite_url: str) -> None:
    _seed(sqlite_url)
    _cli(sqlite_url, "inspect", "managed-ledger", "--path", cursor_path(TOPIC, "sub")).assert_one_line_error(
        1, "does not decode as managed-ledger", "none of its fields")
    for kind in ("managed-ledger", "cursor", "bk-ledger"):
        _cli(sqlite_url, "inspect", kind, "--path", "/empty").assert_one_line_error(1, "is empty")
    _cli(sqlite_url, "inspect", "cursor", "--path", managed_ledger_path(TOPIC)).assert_one_line_error(
        1, "cannot decode")


def test_inspect_usage_mistakes(sqlite_url: str) -> None:
    _seed(sqlite_url)
    _cli(sqlite_url, "inspect", "cursor", "-t", TOPIC).assert_one_line_error(2, "--subscription")
    _cli(sqlite_url, "inspect", "managed-ledger", "-t", TOPIC, "--path", "/x").assert_one_line_error(2, "not both")
    _cli(sqlite_url, "inspect", "managed-ledger", "-t", "a/b/c/d").assert_one_line_error(2, "invalid --topic")
    _cli(sqlite_url, "inspect", "bk-ledger", "7", "--path", "/x").assert_one_line_error(2, "one of them")


def test_bk_path_json() -> None:
    r = run_cli("inspect", "bk-path", "3000000000", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"ledgerId": 3000000000, "path": "/ledgers/000/0000/0030/0000/L0000",
                                    "layout": "hierarchical", "root": "/ledgers"}
    assert run_cli("inspect", "bk-path", "42").stdout.strip() == "/ledgers/00/0000/L0042"  # alone without --json


def _cursor(url: str) -> Position:
    with open_store(url) as store:
        node = store.get(cursor_path(TOPIC, "sub"))
    return decode_cursor(node.data).mark_delete


def test_cursor_reset_named_positions_and_dry_run(sqlite_url: str) -> None:
    _seed(sqlite_url)
    dry = _cli(sqlite_url, "cursor", "reset", "-t", TOPIC, "-s", "sub", "--position", "earliest", "--dry-run",
               "--json")
    assert dry.returncode == 0, dry.stderr
    out = json.loads(dry.stdout)
    assert out["position"] == {"ledgerId": 5, "entryId": 0} and out["dryRun"] is True and out["version"] == 0
    assert _cursor(sqlite_url) == Position(6, 3)  # nothing written
    latest = _cli(sqlite_url, "cursor", "reset", "-t", TOPIC, "-s", "sub", "-p", "latest", "--json")
    assert latest.returncode == 0, latest.stderr
    assert json.loads(latest.stdout)["position"] == {"ledgerId": 7, "entryId": 10}
    assert _cursor(sqlite_url) == Position(7, 9)
    earliest = _cli(sqlite_url, "cursor", "reset", "-t", TOPIC, "-s", "sub", "-p", "EARLIEST")
    assert earliest.returncode == 0 and "5:0" in earliest.stdout
    assert _cursor(sqlite_url) == Position(5, -1)
    _cli(sqlite_url, "cursor", "reset", "-t", TOPIC, "-s", "sub", "-p", "soon").assert_one_line_error(
        2, "--position", "earliest")
