"""The cursor node in a real metadata store (ZooKeeper and SQLite): CAS, refusals, and racing trim."""

from __future__ import annotations

import random
import threading

import pytest

from deletion_service.cursor import (
    CursorLedgerBackedError,
    CursorNotFoundError,
    CursorVersionConflictError,
    Position,
    persistence,
)
from deletion_service.cursor.reset import InvalidResetPosition, reset_in_memory, reset_stored_cursor
from deletion_service.mark_phase.trim import trim
from metastore import ABSENT, CheckVersion, MetadataStoreUnavailable, open_store
from metastore.formats import (
    LedgerInfo,
    ManagedCursorInfo,
    ManagedLedgerInfo,
    MessageRange,
    cursor_path,
    decode_cursor,
    decode_managed_ledger,
    encode_cursor,
    encode_managed_ledger,
    managed_ledger_path,
)
from metastore.interface import Op
from tests.support.counting_stores import FlakyReads

TOPIC = "persistent://t/ns/orders"
SUB = "my sub"
P = Position


@pytest.fixture(params=["zk", "sqlite"])
def store(request: pytest.FixtureRequest):
    url = request.getfixturevalue("zk_url" if request.param == "zk" else "sqlite_url")
    with open_store(url) as s:
        yield s


DEFAULT_MARK_DELETE = P(11, 2)


def seed(store, ledgers=(10, 11, 12), mark_delete=DEFAULT_MARK_DELETE, cursors_ledger_id=-1) -> None:
    ml = ManagedLedgerInfo(ledgers=[LedgerInfo(ledger_id=i, entries=5) for i in ledgers])
    store.put(managed_ledger_path(TOPIC), encode_managed_ledger(ml), ABSENT)
    info = ManagedCursorInfo(
        cursors_ledger_id=cursors_ledger_id, mark_delete=mark_delete,
        individual_deleted_messages=[MessageRange(P(11, 3), P(11, 4))],
        properties={"p": 1}, cursor_properties={"k": "v"}, last_active=123)
    store.put(cursor_path(TOPIC, SUB), encode_cursor(info), ABSENT)


def test_load_save_round_trip_moves_the_version(store) -> None:
    seed(store)
    stored = persistence.load(store, TOPIC, SUB)
    cursor = persistence.to_cursor(stored)
    assert (cursor.mark_delete_position, cursor.read_position, cursor.epoch) == (P(11, 2), P(11, 3), 0)
    saved = persistence.save(store, stored, cursor)  # unchanged content still rewrites the node
    assert saved.version == stored.version + 1
    assert decode_cursor(store.get(stored.path).data) == stored.info


def test_reset_rewrites_the_node_and_keeps_what_we_do_not_model(store) -> None:
    seed(store)
    before = store.get(cursor_path(TOPIC, SUB)).version
    outcome = reset_stored_cursor(store, TOPIC, SUB, P(10, 0))
    node = store.get(cursor_path(TOPIC, SUB))
    info = decode_cursor(node.data)
    assert node.version == outcome.version == before + 1
    assert (outcome.previous, outcome.position, outcome.epoch) == (P(11, 3), P(10, 0), 1)
    assert info.mark_delete == P(10, -1) and info.individual_deleted_messages == []
    assert (info.properties, info.cursor_properties, info.last_active) == ({"p": 1}, {"k": "v"}, 123)


def test_cas_conflict_is_detected(store) -> None:
    seed(store)
    stored = persistence.load(store, TOPIC, SUB)
    cursor = persistence.to_cursor(stored)
    reset_in_memory(cursor, P(12, 0))
    store.put(stored.path, store.get(stored.path).data, stored.version)  # somebody else wrote it
    with pytest.raises(CursorVersionConflictError):
        persistence.save(store, stored, cursor)
    ml = store.get(managed_ledger_path(TOPIC))
    store.put(managed_ledger_path(TOPIC), ml.data, ml.version)
    fresh = persistence.load(store, TOPIC, SUB)
    with pytest.raises(CursorVersionConflictError, match="managed-ledgers"):
        persistence.save(store, fresh, cursor, guards=[CheckVersion(managed_ledger_path(TOPIC), ml.version)])


def test_refusals(store) -> None:
    with pytest.raises(CursorNotFoundError, match="no cursor node"):
        persistence.load(store, TOPIC, SUB)
    seed(store, cursors_ledger_id=77)
    with pytest.raises(CursorLedgerBackedError, match="cursor ledger 77"):
        reset_stored_cursor(store, TOPIC, SUB, P(10, 0))


def test_reset_refuses_a_position_outside_the_ledger_list(store) -> None:
    seed(store)
    with pytest.raises(InvalidResetPosition, match="ledger 9 is not in the managed ledger"):
        reset_stored_cursor(store, TOPIC, SUB, P(9, 0))
    with pytest.raises(InvalidResetPosition, match="past the end"):
        reset_stored_cursor(store, TOPIC, SUB, P(10, 5))
    reset_stored_cursor(store, TOPIC, SUB, P(12, 99))  # the last (open) ledger: any entry


def test_reset_rides_out_a_brief_outage_and_writes_once(store) -> None:
    """Fault injection in-process (``FlakyReads``): each read fails once; reset's own retry answers."""
    seed(store)
    flaky = FlakyReads(store)
    outcome = reset_stored_cursor(flaky, TOPIC, SUB, P(12, 0))
    assert outcome.position == P(12, 0)
    assert flaky.dropped == 2  # the cursor node, the managed-ledger node
    assert flaky.writes == ["multi of 2"]


def test_reset_never_retries_a_write_whose_reply_was_lost(store) -> None:
    seed(store)
    flaky = FlakyReads(store)
    attempts: list[int] = []

    def reply_lost(ops: list[Op]) -> list[int | None]:
        attempts.append(len(ops))
        raise MetadataStoreUnavailable("injected fault: the reply was lost")

    flaky.multi = reply_lost  # type: ignore[method-assign]
    with pytest.raises(MetadataStoreUnavailable, match="reply was lost"):
        reset_stored_cursor(flaky, TOPIC, SUB, P(12, 0))
    assert attempts == [2]


def _trim_once(store) -> None:
    """The real mark phase (sends go nowhere: this race is about the metadata commit)."""
    trim(store, TOPIC, send=lambda requests: ["sent"] * len(requests), offline=True)


@pytest.mark.slow
def test_reset_racing_trim_never_leaves_a_cursor_inside_a_deleted_ledger(zk_url: str) -> None:
    rng = random.Random(7)
    with open_store(zk_url) as store:
        seed(store, ledgers=tuple(range(100, 140)), mark_delete=P(100, -1))
        for _ in range(200):
            ledgers = decode_managed_ledger(store.get(managed_ledger_path(TOPIC)).data).ledger_ids()
            target = P(rng.choice(ledgers[:-1] or ledgers) + rng.choice([0, 0, 1]), rng.randrange(5))
            errors: list[BaseException] = []

            def resetter(target: Position = target, errors: list[BaseException] = errors) -> None:
                try:
                    reset_stored_cursor(store, TOPIC, SUB, target)
                except (InvalidResetPosition, CursorVersionConflictError):
                    pass
                except BaseException as e:  # noqa: BLE001 - reported below
                    errors.append(e)

            threads = [threading.Thread(target=resetter), threading.Thread(target=_trim_once, args=(store,))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not errors, errors
            md = decode_cursor(store.get(cursor_path(TOPIC, SUB)).data).mark_delete
            ids = decode_managed_ledger(store.get(managed_ledger_path(TOPIC)).data).ledger_ids()
            # the ledger the cursor reads from is still listed; a listed-no-more ledger was wholly consumed
            assert md.ledger_id in ids or (md.entry_id >= 4 and md.ledger_id < ids[0]), (md, ids[:3])
