"""Read slots on pulsar-lite: a process reads a topic under its group's slots, never two reads under
one slot at once; with no group, or once a topic's slot was found held elsewhere, it reads with Readers."""

from __future__ import annotations

from deletion_service.broker.read_slots import (
    PER_PROCESS,
    SLOTS,
    SPOILED_PAUSE_S,
    ReadSlots,
    slot_name,
)


def test_reads_of_one_topic_at_once_hold_different_slots_of_the_process_group() -> None:
    claims: list[int] = []

    def claim() -> int:
        claims.append(1)
        return 3
    slots = ReadSlots(claim)
    held = [slots.take("dlq-a") for _ in range(PER_PROCESS)]
    assert held == list(range(3 * PER_PROCESS, 4 * PER_PROCESS))
    assert slots.take("dlq-a") is None, "more reads at once than slots go on with Readers"
    assert slots.take("dlq-b") == 3 * PER_PROCESS, "another topic's slots are its own"
    slots.give_back("dlq-a", held[1])
    assert slots.take("dlq-a") == held[1]
    assert len(claims) == 1, "the group is claimed once"


def test_a_process_without_a_group_reads_with_readers() -> None:
    claims: list[int] = []

    def claim() -> None:
        claims.append(1)
    slots = ReadSlots(claim)
    assert slots.take("dlq") is None
    assert slots.take("dlq") is None
    assert len(claims) == 1, "no group is not asked for again"


def test_a_topic_whose_slot_is_held_elsewhere_is_read_with_readers_from_then_on() -> None:
    slots = ReadSlots(lambda: 0)
    slot = slots.take("dlq")
    assert slot == 0
    slots.give_back("dlq", slot)
    slots.held_elsewhere("dlq")
    assert slots.take("dlq") is None
    assert slots.take("other") == 0


def test_slot_names_are_the_subscriptions_the_broker_shows() -> None:
    assert [slot_name(n) for n in (0, SLOTS - 1)] == ["ledger-deletion-read-0", f"ledger-deletion-read-{SLOTS - 1}"]


def test_a_topic_whose_slot_was_spoiled_is_left_for_readers_for_a_while_and_no_other() -> None:
    """Someone acking under a topic's slot names as fast as reads drop them would make every read of it
    wait and fall back: that topic is read with Readers for a while, then tried again.  Only that topic:
    a tenant spoiling its own DLQ's slots must not send every other topic's reads to Readers."""
    now = [0.0]
    slots = ReadSlots(lambda: 0, clock=lambda: now[0])
    slots.spoiled("dlq-a")
    assert slots.take("dlq-a") is None
    assert slots.take("dlq-b") == 0
    now[0] = SPOILED_PAUSE_S + 0.1
    assert slots.take("dlq-a") == 0
