"""Read slots on pulsar-lite: one process reads a topic under its group's slots, never two reads under
one slot at once, and moves to another group when another process turns out to read in its own."""

from __future__ import annotations

from deletion_service.broker.read_slots import GROUPS, PER_PROCESS, SLOTS, ReadSlots, slot_name


def test_reads_of_one_topic_at_once_hold_different_slots_of_the_process_group() -> None:
    tickets: list[int] = []

    def ticket() -> int:
        tickets.append(1)
        return 3 + GROUPS  # group 3
    slots = ReadSlots(ticket)
    held = [slots.take("dlq-a") for _ in range(PER_PROCESS)]
    assert held == list(range(3 * PER_PROCESS, 4 * PER_PROCESS))
    assert slots.take("dlq-a") is None, "more reads at once than slots go on with Readers"
    assert slots.take("dlq-b") == 3 * PER_PROCESS, "another topic's slots are its own"
    slots.give_back("dlq-a", held[1])
    assert slots.take("dlq-a") == held[1]
    assert len(tickets) == 1, "the ticket is asked once"


def test_processes_with_consecutive_tickets_read_in_different_groups() -> None:
    groups = {ReadSlots(lambda t=t: t).take("dlq") // PER_PROCESS for t in range(100, 100 + GROUPS)}
    assert groups == set(range(GROUPS))


def test_a_slot_held_elsewhere_moves_the_process_to_the_next_group_once() -> None:
    slots = ReadSlots(lambda: GROUPS - 1)
    first = slots.take("dlq")
    assert first == (GROUPS - 1) * PER_PROCESS
    slots.busy_elsewhere(first)  # type: ignore[arg-type]
    slots.busy_elsewhere(first)  # type: ignore[arg-type]  # a second read that met it: no second move
    assert slots.take("dlq") == 0, "the next group, wrapping around"


def test_slot_names_are_the_subscriptions_the_broker_shows() -> None:
    assert [slot_name(n) for n in (0, SLOTS - 1)] == ["ledger-deletion-read-0", f"ledger-deletion-read-{SLOTS - 1}"]
