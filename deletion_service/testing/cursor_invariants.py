"""What "correct" means for the dispatcher model, as checks that raise :class:`InvariantViolation`.

Shared by the scenario replays and the property tests, so a scenario and a
random interleaving are judged by the same three rules:

* **in order** — within one generation (the stream since the last occasional
  change began), each position's *first* delivery comes in increasing order
  (per key under Key_Shared); redeliveries and delayed messages are exempt;
* **nothing stuck** — once drained, every entry from the last change's
  position on was delivered in the last generation (unless acked before it),
  and nothing is held;
* **Key_Shared consistent** — every recently-joined consumer's max read
  position was taken in the current cursor epoch and is not beyond the read position.
"""

from __future__ import annotations

from collections.abc import Iterable

from deletion_service.cursor.dispatcher import Dispatcher
from deletion_service.cursor.reads import Delivery, ReadKind


class InvariantViolation(AssertionError):
    """The model delivered out of order, got stuck, or left Key_Shared state inconsistent."""


def check_in_order(deliveries: Iterable[Delivery], per_key: bool = False) -> None:
    seen: set[tuple[int, object]] = set()
    last: dict[tuple[int, object], Delivery] = {}
    for d in deliveries:
        if (d.generation, d.position) in seen or d.delayed:
            continue
        seen.add((d.generation, d.position))
        stream = (d.generation, d.key if per_key else None)
        previous = last.get(stream)
        if previous is not None and d.position <= previous.position:
            raise InvariantViolation(
                f"out-of-order delivery in generation {d.generation}: {tuple(d.position)} "
                f"after {tuple(previous.position)} ({d.kind} read of epoch {d.cursor_epoch})")
        last[stream] = d


def check_nothing_stuck(dispatcher: Dispatcher) -> None:
    g = dispatcher.generation
    start = dispatcher.generation_start[g]
    delivered = {d.position for d in dispatcher.deliveries if d.generation == g}
    cursor = dispatcher.cursor
    missing = [p for p in dispatcher.log.positions(start)
               if p not in delivered and p > cursor.mark_delete_position and not cursor.acks.is_acked(p)]
    if missing:
        raise InvariantViolation(
            f"stuck: {len(missing)} entries from {tuple(start)} never delivered after the last change "
            f"(first {tuple(missing[0])}); read position {tuple(dispatcher.cursor.read_position)}")
    if len(dispatcher.redelivery) or len(dispatcher.recently_joined):
        raise InvariantViolation(
            f"stuck: {len(dispatcher.redelivery)} held for redelivery, recently joined "
            f"{[n for n, _ in dispatcher.recently_joined.items()]}")


def check_key_shared(dispatcher: Dispatcher) -> None:
    epoch, read = dispatcher.cursor.epoch, dispatcher.cursor.read_position
    for name, joined in dispatcher.recently_joined.items():
        if joined.epoch != epoch or joined.max_read_position > read:
            raise InvariantViolation(
                f"Key_Shared inconsistent: {name} recently joined at {tuple(joined.max_read_position)} "
                f"(epoch {joined.epoch}) but the cursor reads from {tuple(read)} in epoch {epoch}")


def drain(dispatcher: Dispatcher, max_rounds: int = 10_000) -> None:
    """Run the dispatcher to quiescence: complete reads, replay, read on, consumers ack everything."""
    for _ in range(max_rounds):
        progress = False
        reads = list(dispatcher.pending_reads)
        reads += [r for r in (dispatcher.replay(), dispatcher.read_more()) if r is not None]
        for read in reads:  # a replay that only re-holds messages is no progress
            progress |= bool(read.complete()) or (read.kind is ReadKind.SEQUENTIAL and not read.discarded)
        for consumer in list(dispatcher.consumers.values()):
            for position in sorted(consumer.pending):
                progress |= dispatcher.ack(consumer.name, position)
            consumer.client.receive_all()
        if not progress:
            return
    raise InvariantViolation(f"no quiescence after {max_rounds} rounds")
