"""Which offload requests the lane takes in, tenant by tenant.  Pure.

The lane holds at most ``capacity`` undecided requests, and what arrives beyond its room is deferred
to RETRY.  First come, first served, one tenant that keeps the lane full (thousands of requests of
made-up segments, a few more every second) had every other tenant's requests deferred again and
again: another tenant's three genuine copies were not deleted within 200 s (1.1 s alone).  The turns
inside the lane (:mod:`.turns`) cannot help what never gets in.  So admission is shared too:

* **A fair share.**  Each tenant with requests in the lane or arriving may hold ``capacity`` divided
  by the number of such tenants; a tenant at or above its share has what arrives deferred (its
  requests in the lane stay, and leave as they are decided).  A tenant alone may fill the lane.
* **Spare room for those under their share.**  A tenant under its share is taken in even when the
  lane is full, out of a spare of ``capacity // 10`` places, so that it waits for no request of the
  tenant filling the lane to be decided first.  The lane so holds at most 110% of ``capacity``.

A request's tenant is that of the topic it came on: in namespace scope its namespace's request or
RETRY topic, which that namespace's tenant alone writes (a request naming another namespace never gets
here); in cluster scope the cluster's own topic, where only the cluster's components write, so
admission is one tenant's, as before.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

#: The spare, as a part of the capacity: places only tenants under their fair share may take.
SPARE_PART = 10


def admit(arriving: Sequence[T], tenant_of: Callable[[T], str], in_lane: Counter[str], room: int,
          capacity: int) -> tuple[list[T], list[T]]:
    """``arriving`` split into (taken in, deferred), in arrival order.  ``in_lane``: the requests each tenant
    has in the lane now; ``room``: the lane's free places (below 0 once the spare is in use)."""
    held = Counter(in_lane)
    tenants = {t for t, n in held.items() if n > 0} | {tenant_of(r) for r in arriving}
    share = max(1, capacity // max(1, len(tenants)))
    spare = max(0, capacity // SPARE_PART - max(0, -room))
    room = max(0, room)
    taken: list[T] = []
    deferred: list[T] = []
    for request in arriving:
        tenant = tenant_of(request)
        if held[tenant] >= share:
            deferred.append(request)
        elif room > 0:
            room -= 1
            held[tenant] += 1
            taken.append(request)
        elif spare > 0:
            spare -= 1
            held[tenant] += 1
            taken.append(request)
        else:
            deferred.append(request)
    return taken, deferred
