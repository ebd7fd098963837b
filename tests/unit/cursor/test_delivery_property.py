"""Property: any interleaving of reads, completions, acks and resets delivers in order and never sticks."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from deletion_service.cursor import (
    ClientConsumer,
    CursorEpochConflictError,
    CursorModifyingError,
    Dispatcher,
    EntryLog,
    InFlightRead,
    ManagedCursor,
    Position,
)
from deletion_service.cursor.changes import Change
from deletion_service.testing.cursor_invariants import check_in_order, check_key_shared, check_nothing_stuck, drain

LOG = {1: 6, 2: 6, 3: 6}
TARGETS = [Position(ledger, entry) for ledger, count in LOG.items() for entry in range(count)]

op = st.one_of(
    st.tuples(st.just("read")),
    st.tuples(st.just("replay")),
    st.tuples(st.just("complete"), st.integers(0, 5)),
    st.tuples(st.just("ack"), st.integers(0, 20)),
    st.tuples(st.just("nack"), st.integers(0, 20)),
    st.tuples(st.just("begin"), st.sampled_from(TARGETS)),
    st.tuples(st.just("finish")),
    st.tuples(st.just("rewind")),
)


def _pending(d: Dispatcher) -> list[tuple[str, Position]]:
    return sorted((c.name, p) for c in d.consumers.values() for p in c.pending)


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(op, max_size=40), key_shared=st.booleans())
def test_any_interleaving_is_in_order_within_an_epoch_and_drains(ops: list[tuple], key_shared: bool) -> None:
    log = EntryLog()
    for ledger, count in LOG.items():
        for entry in range(count):
            log.append(Position(ledger, entry), key="ab"[entry % 2])
    d = Dispatcher(ManagedCursor("sub", Position(1, -1)), log, key_shared=key_shared, read_batch=3)
    for name in ("c1", "c2"):
        d.add_consumer(ClientConsumer(name))
    outstanding: list[InFlightRead] = []  # includes reads a change made stale
    change: Change | None = None
    for kind, *args in ops:
        if kind in ("read", "replay"):
            try:
                read = d.read_more() if kind == "read" else d.replay()
            except CursorModifyingError:
                assert change is not None
                continue
            if read is not None:
                outstanding.append(read)
        elif kind == "complete" and outstanding:
            outstanding.pop(args[0] % len(outstanding)).complete()
        elif kind in ("ack", "nack") and (pending := _pending(d)):
            consumer, position = pending[args[0] % len(pending)]
            assert (d.ack if kind == "ack" else d.nack)(consumer, position)
        elif kind == "begin":
            try:
                started = d.begin_reset(args[0], disconnect=False)
            except CursorEpochConflictError:
                assert change is not None
                continue
            assert change is None
            change = started
        elif kind == "finish" and change is not None:
            assert d.finish_change(change) == 1
            change = None
        elif kind == "rewind" and change is None:
            d.rewind()
        check_key_shared(d)
        check_in_order(d.deliveries, per_key=key_shared)
    if change is not None:
        d.finish_change(change)
    for read in outstanding:
        read.complete()
    drain(d)
    check_in_order(d.deliveries, per_key=key_shared)
    check_nothing_stuck(d)
    check_key_shared(d)
    assert d.cursor.epoch == d.generation
