"""Which offload requests the lane takes in, tenant by tenant.  Pure (the clock is passed in).

The lane holds at most ``capacity`` undecided requests, and what arrives beyond its room is deferred
to RETRY.  First come, first served, one tenant that keeps the lane full (thousands of requests of
made-up segments, a few more every second) had every other tenant's requests deferred again and
again: another tenant's three genuine copies were not deleted within 200 s (1.1 s alone).  The turns
inside the lane (:mod:`.turns`) cannot help what never gets in.  So admission is shared too:

* **A fair share.**  Each tenant with requests in the lane or arriving may hold ``capacity`` divided
  by the number of such tenants; a tenant at or above its share has what arrives deferred (its
  requests in the lane stay, and leave as they are decided).  A tenant alone may fill the lane.
* **Spare room for those holding little.**  A tenant under its share is taken in even when the lane
  is full, out of a spare of ``capacity // 10`` places, while the requests it has in the lane cost
  less than one dear request (``dear`` parts: storage calls), so that it waits for no request of
  the tenants filling the lane to be decided first.  The lane so holds at most 110% of
  ``capacity``.  Counted in places, twenty tenants each holding a hundred dear requests took every
  spare place as it freed, and a tenant holding none found none.
* **Freed places go to the tenant holding least.**  Share and spare alone were first come, first
  served: colluding tenants sending every second took each freed place back before a deferred
  tenant's request returned (30 s later), and another tenant's copies waited 75 s to over 300 s (1.1 s
  alone).  So the tenant deferred for want of any place that holds the fewest parts in the lane is
  remembered as *waiting* for :data:`WAITING_S`, and while it waits, a place goes to no tenant holding
  more parts than it does; its deferred requests (up to :data:`SOON_PER_TENANT` a pass) come back after
  :data:`SOON_S`, not 30 s, to take them; other tenants' come back at the usual delay, longer in
  proportion as a tenant's recent deferrals outnumber its share (:data:`LATER_S`), so deferrals do
  not circle faster the more tenants send.  Parts, not places: a tenant's few genuine copies (a part
  or two each) must not queue behind tenants whose every request names 65 made-up parts.

A request's tenant is that of the topic it came on: in namespace scope its namespace's request or
RETRY topic, which that namespace's tenant alone writes (a request naming another namespace never gets
here); in cluster scope the cluster's own topic, where only the cluster's components write, so
admission is one tenant's, as before.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

#: The spare, as a part of the capacity: places only tenants under their fair share may take.
SPARE_PART = 10
#: How soon a request deferred for want of any place comes back (its tenant waits for the next one).
SOON_S = 2.0
#: How long a deferred tenant's claim on the next freed place lasts, unless its request comes back.
WAITING_S = 60.0
#: Deferred requests of one tenant a pass that come back soon; the rest come back at the usual delay,
#: so a tenant with thousands deferred does not circle them through RETRY every few seconds.
SOON_PER_TENANT = 32
#: How soon any other deferred request comes back, at the least and at the most.  A tenant whose
#: deferrals within the last :data:`WINDOW_S` outnumber its share waits longer in proportion, so what
#: circles through RETRY is about a share a tenant every 30 s, however much the tenants send: a hundred
#: tenants each sending a request a second had 47,000 deferrals circle in two minutes, and the daemon
#: deferring them was what the other tenants' requests waited for.
LATER_S = 30.0
MAX_LATER_S = 600.0
WINDOW_S = 30.0


@dataclass
class Admitted(Generic[T]):
    """One pass's split: taken in, deferred to come back soon (waiting for the next place), deferred."""

    taken: list[T] = field(default_factory=list)
    soon: list[T] = field(default_factory=list)
    later: list[T] = field(default_factory=list)
    #: how soon each of ``later`` comes back (seconds), in its order
    later_s: list[float] = field(default_factory=list)


class Admission:
    """The lane's door: who is taken in, and the tenants waiting for a freed place (this process's)."""

    def __init__(self) -> None:
        #: tenant -> when its claim on the next freed place ends
        self.waiting: dict[str, float] = {}
        #: deferrals "later" by tenant: this window's and the one before (their sum: the recent ones)
        self._deferred: Counter[str] = Counter()
        self._before: Counter[str] = Counter()
        self._window_began: float | None = None

    def admit(self, arriving: Sequence[T], tenant_of: Callable[[T], str], cost_of: Callable[[T], int],
              in_lane: Counter[str], parts_in_lane: Counter[str], room: int, capacity: int, dear: int,
              now: float) -> Admitted[T]:
        """``arriving`` split, in arrival order.  ``in_lane``/``parts_in_lane``: the requests each tenant
        has in the lane now, and what they cost in parts; ``room``: the lane's free places (below 0 once
        the spare is in use); ``dear``: the parts of the dearest request; ``now``: seconds."""
        self.waiting = {t: until for t, until in self.waiting.items() if until > now}
        self._roll(now)
        held, parts = Counter(in_lane), Counter(parts_in_lane)
        tenants = {t for t, n in held.items() if n > 0} | {tenant_of(r) for r in arriving} | set(self.waiting)
        share = max(1, capacity // max(1, len(tenants)))
        spare = max(0, capacity // SPARE_PART - max(0, -room))
        room = max(0, room)
        out: Admitted[T] = Admitted()
        soon = Counter[str]()
        # Another tenant waits while holding fewer parts than this one exactly when this one holds more than
        # the fewest any waiting tenant holds (the waiting take nothing while they wait).
        fewest = min((parts[t] for t in self.waiting), default=None)
        for request in arriving:
            tenant = tenant_of(request)
            if held[tenant] >= share:
                self._later(out, request, tenant, share)
            elif fewest is not None and parts[tenant] > fewest:
                self._later(out, request, tenant, share)  # the freed place is kept for the waiting tenant
            elif room > 0 or (spare > 0 and parts[tenant] < dear):
                if room > 0:
                    room -= 1
                else:
                    spare -= 1
                held[tenant] += 1
                parts[tenant] += cost_of(request)
                if self.waiting.pop(tenant, None) is not None:
                    fewest = min((parts[t] for t in self.waiting), default=None)
                out.taken.append(request)
            elif soon[tenant] < SOON_PER_TENANT:
                soon[tenant] += 1
                self.waiting[tenant] = now + WAITING_S
                fewest = parts[tenant] if fewest is None else min(fewest, parts[tenant])
                out.soon.append(request)
            else:
                self._later(out, request, tenant, share)
        return out

    def _later(self, out: Admitted[T], request: T, tenant: str, share: int) -> None:
        """Defer ``request`` for :data:`LATER_S`, longer in proportion as its tenant's recent deferrals
        outnumber its share (at most :data:`MAX_LATER_S`)."""
        self._deferred[tenant] += 1
        recent = self._deferred[tenant] + self._before[tenant]
        out.later.append(request)
        out.later_s.append(min(MAX_LATER_S, LATER_S * max(1.0, recent / share)))

    def _roll(self, now: float) -> None:
        """Start a new window of deferral counts when :data:`WINDOW_S` has passed."""
        if self._window_began is None:
            self._window_began = now
        elif now - self._window_began >= WINDOW_S:
            one_window = now - self._window_began < 2 * WINDOW_S
            self._before, self._deferred = (self._deferred if one_window else Counter()), Counter()
            self._window_began = now
