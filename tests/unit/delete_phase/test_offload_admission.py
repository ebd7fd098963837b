"""The offload lane takes requests in tenant by tenant: a tenant keeping the lane full has what it sends
next deferred, another tenant's requests are taken in at once, out of the spare if need be, and a place
freed while a tenant waits for one goes to no tenant holding more than it does."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from deletion_service.delete_phase.offload.admission import (
    SOON_PER_TENANT,
    SPARE_PART,
    WAITING_S,
    Admission,
    Admitted,
)


def _tenant(request: str) -> str:
    return request.split(":")[0]


def admit(arriving: Sequence[str], in_lane: Counter[str], room: int, capacity: int,
          door: Admission | None = None, now: float = 0.0) -> Admitted[str]:
    return (door or Admission()).admit(arriving, _tenant, in_lane, room, capacity, now)


def test_a_tenant_alone_may_fill_the_lane_and_no_more() -> None:
    out = admit([f"a:{n}" for n in range(12)], Counter(), room=10, capacity=10)
    assert out.taken == [f"a:{n}" for n in range(10)] and out.later == ["a:10", "a:11"] and out.soon == []


def test_another_tenant_is_taken_in_while_one_keeps_the_lane_full() -> None:
    """The lane is full of tenant a's requests: b's come in out of the spare, a's next are deferred."""
    out = admit(["a:1", "b:1", "a:2", "b:2"], Counter({"a": 100}), room=0, capacity=100)
    assert out.taken == ["b:1", "b:2"] and out.later == ["a:1", "a:2"]


def test_each_tenant_gets_its_share_of_the_room() -> None:
    arriving = [f"a:{n}" for n in range(80)] + [f"b:{n}" for n in range(80)]
    out = admit(arriving, Counter(), room=100, capacity=100)
    assert Counter(map(_tenant, out.taken)) == {"a": 50, "b": 50}
    assert len(out.later) == 60


def test_the_spare_is_bounded_and_shrinks_as_it_is_used() -> None:
    """A tenth of the capacity, whatever arrives: the lane holds at most 110% of it."""
    arriving = [f"t{n}:0" for n in range(30)]
    assert len(admit(arriving, Counter({"a": 100}), room=0, capacity=100).taken) == 100 // SPARE_PART
    assert len(admit(arriving, Counter({"a": 100, "t0": 4}), room=-4, capacity=100).taken) == 100 // SPARE_PART - 4


def test_requests_already_in_the_lane_count_against_their_tenant() -> None:
    out = admit(["a:1", "b:1"], Counter({"a": 60, "b": 10}), room=30, capacity=100)
    assert out.taken == ["b:1"] and out.later == ["a:1"]


def test_a_place_freed_while_a_tenant_waits_is_kept_for_it_not_for_tenants_sending_every_second() -> None:
    """Lane and spare full (a holds the room, c1..c10 the spare): v, holding nothing, is deferred to come
    back soon; a place then freed goes to none of c1..c10 (each holds one) but to v when it returns."""
    door, full = Admission(), Counter({"a": 100, **{f"c{k}": 1 for k in range(1, 11)}})
    first = admit(["v:1"], full, room=-10, capacity=100, door=door, now=0.0)
    assert first.soon == ["v:1"] and first.taken == []
    freed = full - Counter({"a": 1})
    second = admit([f"c{k}:2" for k in range(1, 11)], freed, room=-9, capacity=100, door=door, now=1.0)
    assert second.taken == [] and len(second.later) == 10, "a colluder took the place kept for v"
    assert admit(["v:1"], freed, room=-9, capacity=100, door=door, now=2.0).taken == ["v:1"]
    assert door.waiting == {}


def test_a_kept_place_is_given_up_when_its_tenant_does_not_return() -> None:
    door, full = Admission(), Counter({"a": 100})
    door.admit(["v:1"], _tenant, full + Counter({"b": 10}), room=-10, capacity=100, now=0.0)
    freed = full + Counter({"b": 8, "c": 1})  # c holds one place, v none: the freed one is kept for v
    assert admit(["c:2"], freed, room=-9, capacity=100, door=door, now=1.0).taken == []
    assert admit(["c:2"], freed, room=-9, capacity=100, door=door, now=WAITING_S + 0.1).taken == ["c:2"]


def test_only_some_of_a_tenants_deferred_requests_come_back_soon() -> None:
    out = admit([f"v:{n}" for n in range(100)], Counter({"a": 100, "b": 10}), room=-10, capacity=100)
    assert len(out.soon) == SOON_PER_TENANT and len(out.later) == 100 - SOON_PER_TENANT


def test_a_tenant_takes_spare_places_only_up_to_its_part_of_the_spare() -> None:
    """Tenants under their share but holding many places (a hundred each) take no spare place; one
    holding none does."""
    in_lane = Counter({f"c{k}": 100 for k in range(20)})
    out = admit([f"c{k}:x" for k in range(20)] + ["v:1"], in_lane, room=0, capacity=2000)
    assert out.taken == ["v:1"] and len(out.later) + len(out.soon) == 20
