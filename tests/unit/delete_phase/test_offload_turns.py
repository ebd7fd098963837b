"""The offload lane's turns (``delete_phase/offload/turns.py``) and a request's storage cost
(``delete_phase/storage/offload_cost.py``), without servers."""

from __future__ import annotations

import json

import pytest

from deletion_service.delete_phase.offload.turns import Turns
from deletion_service.delete_phase.storage.offload_cost import (
    MAX_PARTS_CHECKED,
    beyond_bound,
    parts,
    storage_cost,
)
from deletion_service.protocol.request import decode

Item = tuple[str, int, int]  # (namespace, cost, serial)


def _turns(quantum: int = 10) -> Turns[Item]:
    return Turns(lambda i: i[0], lambda i: i[1], quantum)


def _fill(turns: Turns[Item], namespace: str, cost: int, count: int) -> None:
    for k in range(count):
        turns.append((namespace, cost, k))


def test_a_namespace_behind_a_queue_of_expensive_requests_is_served_in_the_next_turn() -> None:
    turns = _turns()
    _fill(turns, "t0/ns", 10, 50)
    _fill(turns, "t1/ns", 1, 5)
    first = turns.take(100, 20)
    assert [i[0] for i in first] == ["t0/ns", "t1/ns", "t1/ns", "t1/ns", "t1/ns", "t1/ns"]
    assert len(turns) == 49


def test_a_batch_holds_at_most_its_budget_and_always_one_request() -> None:
    turns = _turns(quantum=10)
    _fill(turns, "t0/ns", 10, 5)
    assert len(turns.take(100, 15)) == 1  # the second would pass the budget
    assert len(turns.take(100, 5)) == 1  # dearer than the budget: taken alone
    assert len(turns.take(100, 100)) == 3


def test_cheap_requests_of_one_namespace_still_fill_a_batch() -> None:
    turns = _turns(quantum=65)
    _fill(turns, "t0/ns", 1, 300)
    assert len(turns.take(100, 130)) == 100


def test_tenants_take_turns_before_their_namespaces_do() -> None:
    """A tenant with many namespaces gets one turn, like a tenant with one."""
    turns = _turns(quantum=1)
    for n in range(10):
        _fill(turns, f"many/ns{n}", 1, 2)
    _fill(turns, "one/ns", 1, 3)
    taken = [i[0] for i in turns.take(6, 100)]
    assert taken == ["many/ns0", "one/ns", "many/ns1", "one/ns", "many/ns2", "one/ns"]


def test_what_a_turn_leaves_is_carried_while_the_tenant_has_requests_then_forgotten() -> None:
    turns = _turns(quantum=10)
    _fill(turns, "t0/ns", 6, 4)
    _fill(turns, "t1/ns", 1, 100)
    order = [i[0] for i in turns.take(100, 1000)]
    # t0: 6 (4 left, carried), t1: ten of 1, t0: 14 -> two of 6, t1: ten more, t0: the last one
    assert order[:1] == ["t0/ns"] and order[1:11] == ["t1/ns"] * 10 and order[11:13] == ["t0/ns"] * 2
    assert order[13:23] == ["t1/ns"] * 10 and order[23] == "t0/ns"
    _fill(turns, "t0/ns", 1, 30)  # t0 emptied: its carry is gone, it joins at the back with a fresh turn
    rest = [i[0] for i in turns.take(1000, 10_000)]
    assert rest.count("t0/ns") == 30 and len(turns) == 0


def test_a_tenants_cheap_requests_wait_one_round_of_small_turns_not_a_dear_request_of_every_tenant() -> None:
    """Sixty tenants queue requests of 65 parts, one queues three of one part: with turns of 8 parts its
    three come before any of the sixty's dear requests is served (each needs 9 turns of carry)."""
    turns = _turns(quantum=8)
    for n in range(60):
        _fill(turns, f"t{n}/ns", MAX_PARTS_CHECKED, 3)
    _fill(turns, "victim/ns", 1, 3)
    order = [i[0] for i in turns.take(10_000, 10**9)]
    assert order[:3] == ["victim/ns"] * 3
    assert len(order) == 183 and sorted(set(order)) == sorted({f"t{n}/ns" for n in range(60)} | {"victim/ns"})


def test_requests_put_back_are_taken_first_in_their_order() -> None:
    turns = _turns()
    _fill(turns, "t0/ns", 1, 5)
    batch = turns.take(3, 100)
    turns.put_back(batch)
    assert turns.take(100, 100) == [("t0/ns", 1, k) for k in range(5)]


def test_a_turn_worth_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one part"):
        _turns(quantum=0)


def _request(segments: int, msb: int = 0) -> bytes:
    ctx = {"uidMsb": msb, "uidLsb": 0, "driverName": "aws-s3", "driverMetadata": {"bucket": "b"},
           "segments": [{"uidMsb": k + 1, "uidLsb": 1} for k in range(segments)]}
    return json.dumps({"topicName": "persistent://t/ns/x", "ledgerComponent": "MANAGED_LEDGER",
                       "ledgerType": "OFFLOAD_LEDGER", "ledgerId": 7, "offloadContext": ctx, "reason": "orphan",
                       "markedAt": 1}).encode()


def test_a_requests_parts_are_its_segments_and_its_per_ledger_objects() -> None:
    assert parts(decode(_request(0, msb=5))) == 1
    assert parts(decode(_request(3))) == 3  # streaming only: no per-ledger uuid
    assert parts(decode(_request(3, msb=5))) == 4


def test_a_request_beyond_the_bound_says_so_and_costs_one_part_in_the_lane() -> None:
    within, beyond = decode(_request(MAX_PARTS_CHECKED)), decode(_request(MAX_PARTS_CHECKED + 1))
    assert beyond_bound(within) is None and storage_cost(within) == MAX_PARTS_CHECKED
    why = beyond_bound(beyond)
    assert why is not None and f"names {MAX_PARTS_CHECKED + 1} parts" in why and "one request per segment" in why
    assert storage_cost(beyond) == 1
