"""The offload lane takes requests in tenant by tenant: a tenant keeping the lane full has what it sends
next deferred, another tenant's requests are taken in at once, out of the spare if need be, and a place
freed while a tenant waits for one goes to no tenant holding more parts than it does."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from deletion_service.delete_phase.offload.admission import (
    LATER_S,
    MAX_LATER_S,
    SOON_PER_TENANT,
    SPARE_PART,
    WAITING_S,
    WINDOW_S,
    Admission,
    Admitted,
)

DEAR = 65


def _tenant(request: str) -> str:
    return request.split(":")[0]


def _cost(request: str) -> int:
    """``t:n`` costs one part, ``t:n:dear`` the dearest."""
    return DEAR if request.endswith(":dear") else 1


def admit(arriving: Sequence[str], in_lane: Counter[str], room: int, capacity: int,
          door: Admission | None = None, now: float = 0.0, parts: Counter[str] | None = None) -> Admitted[str]:
    """In-lane parts default to one dear request per place held."""
    parts = parts if parts is not None else Counter({t: n * DEAR for t, n in in_lane.items()})
    return (door or Admission()).admit(arriving, _tenant, _cost, in_lane, parts, room, capacity, DEAR, now)


def test_a_tenant_alone_may_fill_the_lane_and_no_more() -> None:
    out = admit([f"a:{n}" for n in range(12)], Counter(), room=10, capacity=10)
    assert out.taken == [f"a:{n}" for n in range(10)] and out.later + out.soon == ["a:10", "a:11"]


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
    assert len(admit(arriving, Counter({"a": 100, "t0": 4}), room=-4, capacity=100,
                     parts=Counter({"a": 6500, "t0": 4})).taken) == 100 // SPARE_PART - 4


def test_requests_already_in_the_lane_count_against_their_tenant() -> None:
    out = admit(["a:1", "b:1"], Counter({"a": 60, "b": 10}), room=30, capacity=100)
    assert out.taken == ["b:1"] and out.later == ["a:1"]


def test_spare_places_go_to_tenants_holding_less_than_one_dear_request() -> None:
    """Tenants under their share but holding a hundred dear requests each take no spare place; one
    holding a few cheap ones does."""
    in_lane = Counter({**{f"c{k}": 100 for k in range(20)}, "v": 3})
    parts = Counter({**{f"c{k}": 100 * DEAR for k in range(20)}, "v": 3})
    out = admit([f"c{k}:x" for k in range(20)] + ["v:4"], in_lane, room=0, capacity=2000, parts=parts)
    assert out.taken == ["v:4"] and len(out.later) + len(out.soon) == 20


def test_a_place_freed_while_a_tenant_waits_is_kept_for_it_not_for_tenants_holding_more() -> None:
    """Lane and spare full: v, holding nothing, is deferred to come back soon; a place then freed goes to
    none of c1..c10 (each holding one cheap request, so the spare would take them), but to v when it
    returns."""
    door = Admission()
    full = Counter({"a": 100, **{f"c{k}": 1 for k in range(1, 11)}})
    parts = Counter({"a": 100 * DEAR, **{f"c{k}": 1 for k in range(1, 11)}})
    first = admit(["v:1"], full, room=-10, capacity=100, door=door, now=0.0, parts=parts)
    assert first.soon == ["v:1"] and first.taken == []
    freed, freed_parts = full - Counter({"a": 1}), parts - Counter({"a": DEAR})
    second = admit([f"c{k}:2" for k in range(1, 11)], freed, room=-9, capacity=100, door=door, now=1.0,
                   parts=freed_parts)
    assert second.taken == [] and len(second.later) == 10, "a tenant holding more took the place kept for v"
    assert admit(["v:1"], freed, room=-9, capacity=100, door=door, now=2.0, parts=freed_parts).taken == ["v:1"]
    assert door.waiting == {}


def test_a_kept_place_is_given_up_when_its_tenant_does_not_return() -> None:
    door, full = Admission(), Counter({"a": 100, "b": 10})
    assert admit(["v:1"], full, room=-10, capacity=100, door=door, now=0.0).soon == ["v:1"]
    freed = Counter({"a": 100, "b": 8, "c": 1})  # c holds one dear request, v nothing: the freed place is v's
    assert admit(["c:2"], freed, room=-9, capacity=100, door=door, now=1.0).later == ["c:2"]
    assert admit(["c:2"], freed, room=-9, capacity=100, door=door, now=WAITING_S + 0.1,
                 parts=Counter({"a": 6500, "b": 520, "c": 1})).taken == ["c:2"]


def test_only_the_tenant_holding_least_comes_back_soon_and_only_some_of_its_requests() -> None:
    """Deferrals come back at the usual delay unless their tenant is the one a place is kept for: the
    more tenants send, the more RETRY round trips there would be otherwise."""
    in_lane = Counter({"a": 100, "b": 10})
    out = admit([f"v:{n}" for n in range(100)] + ["b:1"], in_lane, room=-10, capacity=100)
    assert len(out.soon) == SOON_PER_TENANT and len(out.later) == 100 - SOON_PER_TENANT + 1
    assert "b:1" in out.later


def test_a_tenant_deferring_more_than_its_share_waits_longer_in_proportion() -> None:
    """What circles through RETRY stays about a share a tenant every 30 s, however much it sends."""
    door, in_lane = Admission(), Counter({"a": 50, "b": 50})  # a and b at their share of 50 each
    first = admit([f"a:{n}" for n in range(50)], in_lane, room=0, capacity=100, door=door, now=0.0)
    assert first.later_s == [LATER_S] * 50  # within its share of deferrals: the usual delay
    second = admit([f"a:{n}" for n in range(50, 150)], in_lane, room=0, capacity=100, door=door, now=1.0)
    assert second.later_s[0] == LATER_S * 51 / 50 and second.later_s[-1] == LATER_S * 3
    flood = admit([f"a:{n}" for n in range(10_000)], in_lane, room=0, capacity=100, door=door, now=2.0)
    assert flood.later_s[-1] == MAX_LATER_S
    assert admit(["b:1"], in_lane, room=0, capacity=100, door=door, now=3.0).later_s == [LATER_S]  # b's own
    later = admit(["a:x"], in_lane, room=0, capacity=100, door=door, now=2 * WINDOW_S + 4)
    assert later.later_s == [LATER_S], "deferrals two windows old no longer count"
