"""The dispatcher with batch-index acks (PIP-54), flow permits (and the seek proposal's stage 1),
and the pause on an ack state over its persist budget."""

from __future__ import annotations

import logging

from deletion_service.cursor import ClientConsumer, Dispatcher, EntryLog, ManagedCursor, Position
from deletion_service.cursor.ack_budget import PersistBudget
from deletion_service.cursor.persistence import StoredCursor, to_info
from metastore.formats import ManagedCursorInfo

P = Position


def _batches(batch_index_acks: bool = True, **kw) -> tuple[Dispatcher, ClientConsumer]:
    """Ledger 4: five batches of 10 messages."""
    log = EntryLog()
    for e in range(5):
        log.append(P(4, e), batch_size=10)
    d = Dispatcher(ManagedCursor("sub", P(4, -1)), log, batch_index_acks=batch_index_acks, **kw)
    client = ClientConsumer("c")
    d.add_consumer(client)
    return d, client


def test_redelivered_batch_carries_its_acked_indexes_and_the_client_skips_them() -> None:
    d, client = _batches()
    d.read_more().complete()
    first = client.receive_all()[0]
    assert first.position == P(4, 0) and first.visible_indexes == list(range(10))
    assert not d.ack_batch_index("c", P(4, 0), [0, 1, 2, 7])  # partly acked: the entry stays unacked
    assert d.cursor.acks.unacked_batch_indexes(P(4, 0)) == frozenset({3, 4, 5, 6, 8, 9})
    d.nack("c", P(4, 0))
    d.replay().complete()
    again = client.receive_all()[0]
    assert again.ack_set == frozenset({0, 1, 2, 7})
    assert again.visible_indexes == [3, 4, 5, 6, 8, 9]
    assert d.ack_batch_index("c", P(4, 0), [3, 4, 5, 6, 8, 9])  # the last indexes: the entry is acked
    assert d.cursor.mark_delete_position == P(4, 0)
    assert d.cursor.acks.unacked_batch_indexes(P(4, 0)) is None


def test_acked_indexes_cost_no_permits() -> None:
    """A redelivered batch of 10 with 7 acked costs 3 permits: with exactly 3, it is delivered."""
    d, client = _batches()
    consumer = d.consumers["c"]
    d.read_more().complete()
    d.ack_batch_index("c", P(4, 0), list(range(7)))
    d.remove_consumer("c")
    client2 = ClientConsumer("c2")
    d.add_consumer(client2, permits=3)  # the first consumer after none: the dispatcher reads from 4:0 again
    d.read_more().complete()
    got = client2.receive_all()
    assert [(m.position, m.visible_indexes) for m in got] == [(P(4, 0), [7, 8, 9])]
    assert d.consumers["c2"].permits == 0 and consumer.permits is None
    assert P(4, 1) in d.redelivery  # 10 more messages, no permits: held, not lost


def test_without_the_flag_index_acks_are_ignored_as_pulsar_does() -> None:
    d, client = _batches(batch_index_acks=False)
    d.read_more().complete()
    client.receive_all()
    assert not d.ack_batch_index("c", P(4, 0), list(range(10)))
    assert d.cursor.acks.unacked_batch_indexes(P(4, 0)) is None
    assert d.ack("c", P(4, 0)) and d.cursor.mark_delete_position == P(4, 0)


def test_a_consumer_gets_no_more_than_its_permits_and_flow_resumes_it() -> None:
    d = Dispatcher(ManagedCursor("sub", P(2, -1)), EntryLog.of({2: 12}))
    client = ClientConsumer("c")
    d.add_consumer(client, permits=2)
    d.read_more().complete()
    assert [m.position for m in client.receive_all()] == [P(2, 0), P(2, 1)]
    assert d.read_more() is None  # no permits: no read at all
    reads = d.flow("c", 3)
    assert [r.kind for r in reads] == ["sequential"]
    reads[0].complete()
    assert [m.position for m in client.receive_all()] == [P(2, 2), P(2, 3), P(2, 4)]


def _reader_seeking_with_flow(epoch_checks: bool) -> tuple[Dispatcher, ClientConsumer, list[Position]]:
    """A Reader acks cumulatively whatever it receives.  Its flow arrives while its seek to 2:1 is
    still being handled at the broker (between the two phases of the change)."""
    d = Dispatcher(ManagedCursor("reader", P(2, -1), epoch_checks=epoch_checks), EntryLog.of({2: 12}))
    client = ClientConsumer("r")
    d.add_consumer(client, permits=4)
    d.read_more().complete()
    for m in client.receive_all():
        d.ack("r", m.position)
    change = d.begin_reset(P(2, 1), disconnect=False)  # the seek, half done
    started = d.flow("r", 4)  # stage 1: must not read from the old position, must not fail
    for r in started:
        r.complete()
    d.finish_change(change)
    for r in d.pending_reads:
        r.complete()
    return d, client, [m.position for m in client.receive_all()]


def test_stage_1_a_flow_during_a_seek_reads_only_after_it_from_the_new_position() -> None:
    d, client, got = _reader_seeking_with_flow(epoch_checks=True)
    assert got == [P(2, 1), P(2, 2), P(2, 3), P(2, 4)]
    assert d.consumers["r"].permits == 0


def test_stage_1_before_pip_269_the_flow_read_comes_from_the_old_position() -> None:
    """What stage 1 prevents: with the checks off, the flow reads 2:4.. before the seek lands."""
    _, _, got = _reader_seeking_with_flow(epoch_checks=False)
    assert got[0] == P(2, 4)


def test_dispatch_pauses_while_the_persisted_state_is_over_budget_and_warns(caplog) -> None:
    budget = PersistBudget(max_bytes=1024, pause_dispatch=True)
    d = Dispatcher(ManagedCursor("sub", P(6, -1)), EntryLog.of({6: 2000}), budget=budget, read_batch=1000)
    d.add_consumer(ClientConsumer("c"))
    d.read_more().complete()
    for e in range(1, 1000, 2):  # 500 scattered acks: ~11 kB of ranges
        d.ack("c", P(6, e))
    stored = StoredCursor("/managed-ledgers/t/ns/persistent/x/sub", ManagedCursorInfo(-1, P(6, -1)), 0)
    with caplog.at_level(logging.WARNING):
        plan = to_info(stored, d.cursor, budget)
    assert not plan.complete and plan.persisted_size <= 1024
    assert d.paused_for_ack_state and d.read_more() is None and d.replay() is None
    warning = next(r.getMessage() for r in caplog.records if "persist budget" in r.getMessage())
    assert f"leaving out {plan.dropped_ranges} ranges" in warning
    for e in range(0, 1000, 2):  # the holes get acked: the state shrinks to nothing
        d.ack("c", P(6, e))
    assert to_info(stored, d.cursor, budget).complete
    assert not d.paused_for_ack_state and d.read_more() is not None


def test_without_the_pause_dispatch_goes_on_over_budget() -> None:
    budget = PersistBudget(max_bytes=1024, pause_dispatch=False)
    d = Dispatcher(ManagedCursor("sub", P(6, -1)), EntryLog.of({6: 2000}), budget=budget, read_batch=1000)
    d.add_consumer(ClientConsumer("c"))
    d.read_more().complete()
    for e in range(1, 1000, 2):
        d.ack("c", P(6, e))
    to_info(StoredCursor("/x", ManagedCursorInfo(-1, P(6, -1)), 0), d.cursor, budget)
    assert d.cursor.metadata_size > 1024 and not d.paused_for_ack_state and d.read_more() is not None


def test_permits_of_a_consumer_that_joined_during_a_change_are_kept() -> None:
    d = Dispatcher(ManagedCursor("sub", P(2, -1)), EntryLog.of({2: 12}))
    change = d.begin_reset(P(2, 3))
    client = ClientConsumer("late")
    d.add_consumer(client, permits=0)
    assert d.flow("late", 2) == []  # the change runs: no read yet
    d.finish_change(change)
    [read] = d.pending_reads  # the flow's read starts when the change ends
    read.complete()
    assert [m.position for m in client.receive_all()] == [P(2, 3), P(2, 4)]


def test_a_batch_bigger_than_the_permit_window_is_still_delivered() -> None:
    d, client = _batches()
    d.remove_consumer("c")
    small = ClientConsumer("small")
    d.add_consumer(small, permits=4)
    d.read_more().complete()
    assert [m.position for m in small.receive_all()] == [P(4, 0)]  # 10 messages on 4 permits, as Pulsar
    assert d.consumers["small"].permits == -6 and d.read_more() is None


def test_the_service_config_switches_batch_index_acks_and_the_pause() -> None:
    from deletion_service.config import DeletionConfig

    config = DeletionConfig(acknowledgment_at_batch_index_level_enabled=True,
                            managed_ledger_max_ack_state_in_bytes_to_persist=4096)
    d = Dispatcher.from_config(ManagedCursor("sub", P(1, -1)), EntryLog.of({1: 3}), config, read_batch=2)
    assert d.batch_index_acks and d.read_batch == 2
    assert d.budget == PersistBudget(max_bytes=4096, max_ranges=None, pause_dispatch=True)
    assert not Dispatcher.from_config(ManagedCursor("s", P(1, -1)), EntryLog(), DeletionConfig()).batch_index_acks
