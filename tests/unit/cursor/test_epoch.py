"""The PIP-269 cursor API as the design fixes it, its lock, ack ranges and metrics."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import CollectorRegistry

from deletion_service.cursor import (
    AckState,
    CursorEpochConflictError,
    CursorModifyingError,
    ManagedCursor,
    Position,
    parse_position,
    predecessor,
)
from deletion_service.cursor.epoch_metrics import EpochMetrics
from deletion_service.cursor.reset import reset_in_memory

P = Position


def test_positions_are_ordered_hashable_and_parse() -> None:
    assert P(3, 9) < P(4, 0) and len({P(1, 2), P(1, 2)}) == 1
    assert (P(3, 5).ledger_id, P(3, 5).entry_id) == (3, 5)
    assert parse_position(" 12:0 ") == P(12, 0)
    assert predecessor(P(12, 0)) == P(12, -1)
    for bad in ("12", "a:b", "1:2:3", "-1:0", ""):
        with pytest.raises(ValueError, match="LEDGER:ENTRY|>= 0"):
            parse_position(bad)


def test_epoch_two_phase_api() -> None:
    c = ManagedCursor("sub", P(3, 4))
    assert (c.epoch, c.read_position, c.mark_delete_position) == (0, P(3, 5), P(3, 4))
    read_epoch = c.read_epoch()
    assert c.start_increase_epoch(lambda: P(3, 0)) == 0
    assert c.read_position == P(3, 0) and c.modifying
    assert c.is_epoch_outdated(read_epoch)
    assert not c.set_read_position(P(3, 7), read_epoch)  # no change while modifying
    with pytest.raises(CursorEpochConflictError):
        c.start_increase_epoch(lambda: P(9, 9))
    with pytest.raises(CursorModifyingError):
        c.read_epoch()
    assert c.end_increase_epoch() == 1 and c.epoch == 1 and not c.modifying
    assert c.end_increase_epoch() == 0 and c.epoch == 1
    assert c.is_epoch_outdated(read_epoch) and not c.set_read_position(P(3, 7), read_epoch)
    assert c.read_position == P(3, 0)
    assert not c.is_epoch_outdated(1) and c.set_read_position(P(3, 7), 1)
    assert c.read_position == P(3, 7)


def test_epoch_checks_off_is_the_pre_pip_behaviour() -> None:
    c = ManagedCursor("sub", P(3, 4), epoch_checks=False)
    c.start_increase_epoch(lambda: P(3, 0))
    c.start_increase_epoch(lambda: P(3, 1))  # no conflict detection
    assert not c.is_epoch_outdated(0) and c.set_read_position(P(3, 9), 0)


def test_reset_sets_mark_delete_to_the_predecessor_and_clears_acks() -> None:
    c = ManagedCursor("sub", P(3, 4), acks=AckState())
    c.ack(P(3, 7), lambda p: p)
    assert len(c.acks) == 1
    assert reset_in_memory(c, P(2, 0)) == 1
    assert (c.read_position, c.mark_delete_position, len(c.acks)) == (P(2, 0), P(2, -1), 0)


def test_acks_merge_and_advance_mark_delete() -> None:
    c = ManagedCursor("sub", P(3, -1))
    for e in (2, 1, 4):
        c.ack(P(3, e), lambda p: p)
    assert c.mark_delete_position == P(3, -1)
    assert [tuple(map(tuple, r)) for r in c.acks.ranges()] == [((3, 0), (3, 2)), ((3, 3), (3, 4))]
    c.ack(P(3, 0), lambda p: p)
    assert c.mark_delete_position == P(3, 2) and c.acks.ranges()[0].upper == P(3, 4)
    c.ack(P(3, 3), lambda p: p)
    assert c.mark_delete_position == P(3, 4) and len(c.acks) == 0


def test_concurrent_reads_never_move_the_cursor_across_a_change() -> None:
    """Readers hammer set_read_position with the epoch they read; changers reset. A successful
    set_read_position must always carry the epoch current at that moment (checked under the lock)."""
    c = ManagedCursor("sub", P(1, -1))
    stop = threading.Event()
    violations: list[str] = []

    def reader() -> None:
        while not stop.is_set():
            try:
                epoch = c.read_epoch()
            except CursorModifyingError:
                continue
            moved = c.set_read_position(P(100, epoch), epoch)
            if moved and c.read_position.ledger_id == 100 and c.read_position.entry_id > c.epoch:
                violations.append(f"read at epoch {c.read_position.entry_id} > {c.epoch}")

    done: list[int] = []

    def changer() -> None:
        mine = 0
        while mine < 150:
            try:
                c.start_increase_epoch(lambda: P(1, 0))
            except CursorEpochConflictError:
                continue
            for _ in range(50):  # readers run meanwhile; none may move the read position
                if c.read_position != P(1, 0):
                    violations.append(f"read position moved during a change: {c.read_position}")
            done.append(c.end_increase_epoch())
            mine += 1

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    changers = [threading.Thread(target=changer) for _ in range(2)]
    for t in changers:
        t.start()
    for t in changers:
        t.join()
    stop.set()
    for t in threads:
        t.join()
    assert not violations and not c.modifying
    assert c.epoch == sum(done) >= 300


def test_metrics_count_changes_and_show_a_running_task() -> None:
    registry = CollectorRegistry()
    m = EpochMetrics("c1", "t/ns", "persistent://t/ns/x", "sub", registry=registry)
    labels = {"cluster": "c1", "namespace": "t/ns", "topic": "persistent://t/ns/x", "subscription": "sub"}
    c = ManagedCursor("sub", P(3, 4), observer=m)

    def value(name: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("pulsar_cursor_epoch_increase_task_state") == 0
    c.start_increase_epoch(lambda: P(3, 0))
    assert value("pulsar_cursor_epoch_increase_task_state") == 1
    assert value("pulsar_cursor_epoch_increase_count_total") == 0
    c.end_increase_epoch()
    c.end_increase_epoch()  # nothing running: not counted
    assert value("pulsar_cursor_epoch_increase_task_state") == 0
    assert value("pulsar_cursor_epoch_increase_count_total") == 1
    EpochMetrics("c1", "t/ns", "persistent://t/ns/y", "sub", registry=registry)  # same registry, no clash
