"""The offload lane takes requests in tenant by tenant: a tenant keeping the lane full has what it sends
next deferred, and another tenant's requests are taken in at once, out of the spare if need be."""

from __future__ import annotations

from collections import Counter

from deletion_service.delete_phase.offload.admission import SPARE_PART, admit


def _tenant(request: str) -> str:
    return request.split(":")[0]


def test_a_tenant_alone_may_fill_the_lane_and_no_more() -> None:
    taken, deferred = admit([f"a:{n}" for n in range(12)], _tenant, Counter(), room=10, capacity=10)
    assert taken == [f"a:{n}" for n in range(10)] and deferred == ["a:10", "a:11"]


def test_another_tenant_is_taken_in_while_one_keeps_the_lane_full() -> None:
    """The lane is full of tenant a's requests: b's come in out of the spare, a's next are deferred."""
    arriving = ["a:1", "b:1", "a:2", "b:2"]
    taken, deferred = admit(arriving, _tenant, Counter({"a": 100}), room=0, capacity=100)
    assert taken == ["b:1", "b:2"] and deferred == ["a:1", "a:2"]


def test_each_tenant_gets_its_share_of_the_room() -> None:
    arriving = [f"a:{n}" for n in range(80)] + [f"b:{n}" for n in range(80)]
    taken, deferred = admit(arriving, _tenant, Counter(), room=100, capacity=100)
    assert Counter(map(_tenant, taken)) == {"a": 50, "b": 50}
    assert len(deferred) == 60


def test_the_spare_is_bounded_and_shrinks_as_it_is_used() -> None:
    """A tenth of the capacity, whatever arrives: the lane holds at most 110% of it."""
    arriving = [f"t{n}:0" for n in range(30)]
    taken, _ = admit(arriving, _tenant, Counter({"a": 100}), room=0, capacity=100)
    assert len(taken) == 100 // SPARE_PART
    taken, _ = admit(arriving, _tenant, Counter({"a": 100, "t0": 4}), room=-4, capacity=100)
    assert len(taken) == 100 // SPARE_PART - 4


def test_requests_already_in_the_lane_count_against_their_tenant() -> None:
    taken, deferred = admit(["a:1", "b:1"], _tenant, Counter({"a": 60, "b": 10}), room=30, capacity=100)
    assert taken == ["b:1"] and deferred == ["a:1"]
