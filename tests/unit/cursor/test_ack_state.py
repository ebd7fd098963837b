"""AckState (per-ledger bitmaps, batch-index acks) against a plain reference model, with Hypothesis.

The reference is the obvious thing: a set of acked positions and, per partly
acked batch, the set of acked indexes.  Every operation is applied to both and
every observable compared: ``is_acked``, ``unacked_batch_indexes``, the
persisted ranges, the exact encoded size (against the real protobuf encoder),
the encode/decode round trip, mark-delete advance and the budget's prefix.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deletion_service.cursor import AckState, ManagedCursor, Position
from deletion_service.cursor.ack_budget import PersistBudget, head, plan_persist
from deletion_service.cursor.log import EntryLog
from metastore.formats import ManagedCursorInfo, MessageRange, decode_cursor, encode_cursor
from metastore.formats.cursor_info import cursor_to_proto

P = Position
LEDGERS = (3, 7, 200, 2**33)
ENTRIES = st.one_of(st.integers(0, 20), st.sampled_from([127, 128, 129, 16383, 16384, 2**21, 2**28, 2**32 - 1]))
POSITIONS = st.builds(P, st.sampled_from(LEDGERS), ENTRIES)
BATCH_ACK = st.tuples(st.just("batch"), POSITIONS, st.integers(1, 70), st.lists(st.integers(0, 69), max_size=8))
OPS = st.lists(st.one_of(st.tuples(st.just("ack"), POSITIONS), BATCH_ACK), max_size=60)


@dataclasses.dataclass
class Reference:
    """The obviously right model: sets, no bitmaps, no ranges."""

    acked: set[Position] = dataclasses.field(default_factory=set)
    batches: dict[Position, tuple[int, set[int]]] = dataclasses.field(default_factory=dict)

    def ack(self, p: Position) -> None:
        self.acked.add(p)
        self.batches.pop(p, None)

    def ack_batch_index(self, p: Position, size: int, indexes: list[int]) -> None:
        if p in self.acked:
            return
        known_size, done = self.batches.setdefault(p, (size, set()))
        done.update(indexes)
        if done >= set(range(known_size)):
            self.ack(p)

    def ranges(self) -> list[tuple[tuple[int, int], tuple[int, int]]]:
        """Runs of consecutive acked entries within a ledger, as (lower, upper]."""
        out = []
        for p in sorted(self.acked):
            if out and out[-1][1] == (p.ledger_id, p.entry_id - 1):
                out[-1] = (out[-1][0], tuple(p))
            else:
                out.append(((p.ledger_id, p.entry_id - 1), tuple(p)))
        return out

    def unacked(self, p: Position) -> frozenset[int] | None:
        if p not in self.batches:
            return None
        size, done = self.batches[p]
        return frozenset(range(size)) - done


def apply(ops, state: AckState, ref: Reference) -> None:
    for op in ops:
        if op[0] == "ack":
            state.ack(op[1])
            ref.ack(op[1])
        else:
            _, p, size, indexes = op
            indexes = [i for i in indexes if i < size]
            known = ref.batches.get(p, (size, None))[0]  # a batch keeps the size it was first acked with
            indexes = [i for i in indexes if i < known]
            state.ack_batch_index(p, known, indexes)
            ref.ack_batch_index(p, known, indexes)


def node(state: AckState, **extra) -> ManagedCursorInfo:
    return ManagedCursorInfo(-1, mark_delete=P(1, -1), individual_deleted_messages=state.ranges(),
                             batched_entry_deletion_index_info=state.batch_indexes(), **extra)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_ack_state_matches_the_reference_model(ops) -> None:
    state, ref = AckState(), Reference()
    apply(ops, state, ref)
    touched = {op[1] for op in ops}
    for p in touched:
        assert state.is_acked(p) == (p in ref.acked), p
        assert state.unacked_batch_indexes(p) == ref.unacked(p), p
    assert [(tuple(r.lower), tuple(r.upper)) for r in state.ranges()] == ref.ranges()
    assert len(state) == len(ref.ranges())
    base = len(cursor_to_proto(ManagedCursorInfo(-1, mark_delete=P(1, -1))))
    assert state.encoded_size() == len(cursor_to_proto(node(state))) - base


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_encode_decode_round_trip_restores_the_same_state(ops) -> None:
    state, ref = AckState(), Reference()
    apply(ops, state, ref)
    info = decode_cursor(encode_cursor(node(state)))
    again = AckState(info.individual_deleted_messages, info.batched_entry_deletion_index_info)
    assert again.ranges() == state.ranges()
    assert again.batch_indexes() == state.batch_indexes()
    for op in ops:
        assert again.is_acked(op[1]) == state.is_acked(op[1])
        assert again.unacked_batch_indexes(op[1]) == state.unacked_batch_indexes(op[1])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 29), st.one_of(st.none(), st.lists(st.integers(0, 3), max_size=4))),
                max_size=80))
def test_mark_delete_advances_exactly_over_contiguous_acks(acks) -> None:
    """Entries 0..29 of ledger 5 then 0..9 of ledger 8, every fourth one a batch of 4."""
    log = EntryLog()
    for ledger_id, count in ((5, 30), (8, 10)):
        for e in range(count):
            log.append(P(ledger_id, e), batch_size=4 if e % 4 == 0 else 1)
    cursor, acked = ManagedCursor("sub", P(5, -1)), set()
    partial: dict[Position, set[int]] = {}
    for e, indexes in acks:
        p = P(5, e) if e < 30 else P(8, e - 30)
        size = log.entry(p).batch_size
        if indexes is None or size == 1:
            cursor.ack(p, log.next_valid)
            acked.add(p)
        else:
            cursor.ack_batch_index(p, size, indexes, log.next_valid)
            partial.setdefault(p, set()).update(indexes)
            if partial[p] >= set(range(size)):
                acked.add(p)
    expected = P(5, -1)
    for p in log.positions():
        if p not in acked:
            break
        expected = p
    assert cursor.mark_delete_position == expected
    assert all(r.lower >= expected for r in cursor.acks.ranges())  # nothing left below mark-delete
    assert all(p > expected for p, _ in cursor.acks.batch_entries())


def _items_in_order(state: AckState) -> list[tuple[str, object]]:
    items = [(tuple(r.lower), 0, "range", r) for r in state.ranges()]
    items += [((b.position.ledger_id, b.position.entry_id), 1, "batch", b) for b in state.batch_indexes()]
    return [(kind, item) for *_, kind, item in sorted(items, key=lambda i: (i[0], i[1]))]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS, st.dictionaries(st.text(min_size=1, max_size=12), st.integers(-(2**40), 2**40), max_size=6),
       st.integers(0, 1200), st.one_of(st.none(), st.integers(0, 10)))
def test_budget_keeps_properties_then_the_longest_prefix_that_fits(ops, producers, budget, max_ranges) -> None:
    state, ref = AckState(), Reference()
    apply(ops, state, ref)
    info = ManagedCursorInfo(-1, mark_delete=P(1, -1), properties=producers, cursor_properties={"sub": "props"})
    plan = plan_persist(info, state, PersistBudget(max_bytes=budget, max_ranges=max_ranges))
    written = plan.info
    assert written.cursor_properties == {"sub": "props"}  # subscription properties: always
    assert list(written.properties) == list(producers)[:len(written.properties)]  # producers in order
    base = len(cursor_to_proto(dataclasses.replace(written, individual_deleted_messages=[],
                                                   batched_entry_deletion_index_info=[])))
    assert len(cursor_to_proto(written)) == plan.persisted_size
    assert plan.full_size == len(cursor_to_proto(dataclasses.replace(
        info, individual_deleted_messages=state.ranges(), batched_entry_deletion_index_info=state.batch_indexes())))
    kept = [("range", r) for r in written.individual_deleted_messages]
    kept += [("batch", b) for b in written.batched_entry_deletion_index_info]
    order = _items_in_order(state)
    assert sorted(kept, key=order.index) == order[:len(kept)]  # a prefix, nearest mark-delete first
    assert plan.dropped_ranges + len(written.individual_deleted_messages) == len(state)
    if base <= budget:
        assert plan.persisted_size <= budget
    if len(kept) < len(order) and len(written.properties) == len(producers):
        nxt = order[len(kept)]  # the first item left out did not fit (or the range count was reached)
        grown = dataclasses.replace(
            written, individual_deleted_messages=[*written.individual_deleted_messages, nxt[1]]
            if nxt[0] == "range" else written.individual_deleted_messages,
            batched_entry_deletion_index_info=[*written.batched_entry_deletion_index_info, nxt[1]]
            if nxt[0] == "batch" else written.batched_entry_deletion_index_info)
        over_count = max_ranges is not None and nxt[0] == "range" and len(written.individual_deleted_messages) \
            >= max_ranges
        assert over_count or len(cursor_to_proto(grown)) > budget
    assert plan.complete == (plan.dropped_ranges == plan.dropped_batch == 0
                             and len(written.properties) == len(producers))


def test_a_million_scattered_acks_stay_compact_and_cut_as_a_prefix() -> None:
    state = AckState()
    for e in range(0, 2_000_000, 2):
        state.ack(P(9, e))
    assert len(state) == 1_000_000 and state.acked_count() == 1_000_000
    cut = head(state, 64 * 1024)
    assert cut.size <= 64 * 1024 and cut.ranges[0] == MessageRange(P(9, -1), P(9, 0))
    assert cut.ranges == [MessageRange(P(9, 2 * i - 1), P(9, 2 * i)) for i in range(len(cut.ranges))]
    assert cut.dropped_ranges == 1_000_000 - len(cut.ranges)


@pytest.mark.parametrize("bad", [
    lambda s: s.ack(P(1, 2**32)),
    lambda s: s.ack(P(1, -3)),
    lambda s: s.ack_batch_index(P(1, 1), 4, [4]),
    lambda s: s.ack_batch_index(P(1, 1), 0, []),
    lambda s: AckState([MessageRange(P(1, 5), P(1, 2**40))]),
])
def test_out_of_range_input_is_refused_with_a_clear_error(bad) -> None:
    with pytest.raises(ValueError, match="outside|at least"):
        bad(AckState())


def test_a_range_spanning_ledgers_is_kept_as_read_and_honoured() -> None:
    span = MessageRange(P(3, 7), P(5, 2))
    state = AckState([span, MessageRange(P(6, -1), P(6, 1))])
    assert state.is_acked(P(3, 8)) and state.is_acked(P(4, 100)) and state.is_acked(P(5, 2))
    assert not state.is_acked(P(3, 7)) and not state.is_acked(P(5, 3))
    assert state.ranges() == [span, MessageRange(P(6, -1), P(6, 1))]
    state.trim_to(P(4, 0))
    assert state.ranges()[0] == MessageRange(P(4, 0), P(5, 2))


def test_the_ack_state_bench_prints_its_four_figures(capsys) -> None:
    """The figures themselves go in the closing note; here only that the bench runs and measures."""
    from bench import ack_state

    assert ack_state.main(["--acks", "4000", "--entries-per-ledger", "1000", "--repeat", "1", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert {"acksPerSecond", "bytesPerRangeSerialized", "memoryBytesPerRange", "setAddsPerSecond"} <= set(figures)
    assert figures["ranges"] == 4000 and figures["ledgers"] == 8 and figures["encodedSizeMatches"] is True
    assert 18 <= figures["bytesPerRangeSerialized"] <= 32 and figures["acksPerSecond"] > 0
