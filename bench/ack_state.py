"""The ack-state figures: a million individual acks with a 50% hole pattern.

    python -m bench.ack_state [--acks 1000000] [--entries-per-ledger 50000] [--repeat 3] [--json]

Every second entry is acked, so each ack is its own range, the worst case for
a range set: a million acks are a million ranges.  Ledgers hold 50,000 entries
(Pulsar's ``managedLedgerMaxEntriesPerLedger``).  In the same run:

* ``setAddsPerSecond`` — a plain Python ``set.add`` of the same positions, the yardstick;
* ``acksPerSecond`` — ``AckState.ack`` of them, one call each;
* ``bytesPerRangeSerialized`` — the cursor node's bytes per range, by the real
  protobuf encoder (and the closed-form ``encoded_size`` beside it);
* ``memoryBytesPerRange`` — what the state holds per range: roaring's container
  bytes (C memory, which ``tracemalloc`` cannot see) plus the Python objects around
  them, as ``tracemalloc`` counts them.

Rates are the best of ``--repeat`` runs, each on fresh objects.  Figures are
printed, never asserted.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import tracemalloc

from deletion_service.cursor.acks import AckState
from deletion_service.cursor.position import Position
from metastore.formats import ManagedCursorInfo
from metastore.formats.cursor_info import cursor_to_proto

TARGETS = {"acksPerSecond / setAddsPerSecond": 0.5, "bytesPerRangeSerialized": 32, "memoryBytesPerRange": 100}
FIRST_LEDGER = 1_000_000  # ledger ids of a cluster that has run a while: 3-byte varints


def positions(acks: int, per_ledger: int) -> list[Position]:
    """Every second entry of consecutive ledgers, ``acks`` of them."""
    half = per_ledger // 2
    return [Position(FIRST_LEDGER + i // half, 2 * (i % half)) for i in range(acks)]


def _rate(run, items: list[Position], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        run(items)
        best = min(best, time.perf_counter() - start)
    return len(items) / best


def set_adds(items: list[Position]) -> None:
    seen: set[Position] = set()
    add = seen.add
    for p in items:
        add(p)


def acks(items: list[Position]) -> AckState:
    state = AckState()
    ack = state.ack
    for p in items:
        ack(p)
    return state


def memory_bytes(items: list[Position]) -> int:
    """Roaring's container bytes plus the Python allocations the state made."""
    gc.collect()
    tracemalloc.start()
    state = acks(items)
    python_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    containers = 0
    for ledger_id in state.ledger_ids():
        stats = state.ledger_bitmap(ledger_id).get_statistics()
        containers += (stats["n_bytes_array_containers"] + stats["n_bytes_run_containers"]
                       + stats["n_bytes_bitset_containers"])
    return python_bytes + containers


def serialized(state: AckState) -> tuple[int, int]:
    """(bytes by the real encoder, bytes by ``encoded_size``) of the ranges in a cursor node."""
    base = ManagedCursorInfo(-1, mark_delete=Position(FIRST_LEDGER, -1))
    full = ManagedCursorInfo(-1, mark_delete=Position(FIRST_LEDGER, -1), individual_deleted_messages=state.ranges())
    return len(cursor_to_proto(full)) - len(cursor_to_proto(base)), state.encoded_size()


def run(count: int, per_ledger: int, repeat: int) -> dict:
    items = positions(count, per_ledger)
    set_rate = _rate(set_adds, items, repeat)
    ack_rate = _rate(acks, items, repeat)
    state = acks(items)
    ranges = len(state)
    encoded, closed_form = serialized(state)
    memory = memory_bytes(items)
    return {
        "acks": count, "ranges": ranges, "ledgers": len(state.ledger_ids()),
        "setAddsPerSecond": round(set_rate), "acksPerSecond": round(ack_rate),
        "acksPerSetAdd": round(ack_rate / set_rate, 3),
        "bytesPerRangeSerialized": round(encoded / ranges, 2), "encodedSizeMatches": encoded == closed_form,
        "memoryBytesPerRange": round(memory / ranges, 3),
    }


def _table(figures: dict) -> str:
    ratio = figures["acksPerSetAdd"]
    rows = [
        ("set.add (same positions)", f"{figures['setAddsPerSecond']:,} /s", ""),
        ("AckState.ack", f"{figures['acksPerSecond']:,} /s", ""),
        ("acks / set adds", f"{ratio}x", f">= {TARGETS['acksPerSecond / setAddsPerSecond']}x"),
        ("serialized bytes per range", str(figures["bytesPerRangeSerialized"]),
         f"<= {TARGETS['bytesPerRangeSerialized']}"),
        ("memory bytes per range", str(figures["memoryBytesPerRange"]), f"<= {TARGETS['memoryBytesPerRange']}"),
    ]
    head = f"{figures['acks']:,} acks, 50% holes: {figures['ranges']:,} ranges over {figures['ledgers']} ledgers"
    return "\n".join([head, *(f"  {a:<28} {b:>16}   {c}" for a, b, c in rows)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ack_state", description=__doc__.split("\n")[0])
    parser.add_argument("--acks", type=int, default=1_000_000)
    parser.add_argument("--entries-per-ledger", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args(argv)
    figures = run(args.acks, args.entries_per_ledger, args.repeat)
    print(json.dumps(figures) if args.json else _table(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
