"""The offload lane's queue: requests of different namespaces take turns, each turn paid in storage calls.

Served in arrival order, one namespace's queue of expensive requests (each part a request names is
a storage call) would delay every other namespace's by the whole queue: a tenant's genuine copies
would wait minutes behind another's few hundred made-up segments.  So the lane's queues are
:class:`Turns`:

* **Whose turn.**  Requests are queued per namespace, namespaces per tenant.  Tenants take turns;
  within a tenant, its namespaces take turns request by request.  Turns go by tenant first because
  a tenant's administrator can create namespaces: per namespace alone, one with a hundred namespaces
  would get a hundred turns to another tenant's one.  The namespace is the request's
  ``topicName``'s, which the lane may trust: in namespace scope a request naming another namespace
  than the topic it was read from never reaches the lane (parked ``cross-namespace``), and in cluster
  scope only the cluster's own components write to the request topic.
* **What a turn is worth.**  A request costs its parts (``storage/offload_cost.py``: one storage
  call per absent part, at most :data:`~.offload_cost.MAX_PARTS_CHECKED`), and a turn is worth
  ``quantum`` parts (deficit round robin): a tenant sending cheap requests has many served in its
  turn, one sending expensive ones one every few turns (what a turn leaves unspent is carried to the
  tenant's next turn while it has requests queued, then forgotten).  A request dearer than a turn
  waits until its tenant's carry pays for it, so a round of turns costs about ``quantum`` parts a
  tenant, whatever the others' requests cost.
* **What a batch is worth.**  A batch (:meth:`Turns.take`) holds at most ``budget`` parts (and
  always one request), so a batch in progress holds at most ``budget`` parts of one tenant's
  expensive requests, not a hundred of them; a batch that fills mid-turn leaves the turn to go on
  in the next batch.

So a namespace's request waits for at most the batch in progress and about one round of ``quantum``
parts a tenant (with a little more for each tenant whose carry then pays for a dear request),
whatever their queues hold.  Nothing here decides a request: the lane takes
what it is given, in this order, and every guarantee of the lane (ownership, pause, claims) is the
lane's.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class _Tenant(Generic[T]):
    """One tenant's queued requests, by namespace in turn order, and what its turn has left to spend."""

    namespaces: OrderedDict[str, deque[T]] = field(default_factory=OrderedDict)
    deficit: int = 0
    in_turn: bool = False

    def head(self) -> T:
        return next(iter(self.namespaces.values()))[0]

    def pop(self) -> T:
        """The head of the namespace whose turn it is; that namespace goes to the back."""
        namespace, queue = next(iter(self.namespaces.items()))
        item = queue.popleft()
        if queue:
            self.namespaces.move_to_end(namespace)
        else:
            del self.namespaces[namespace]
        return item


class Turns(Generic[T]):
    """Requests queued per (tenant, namespace), taken in turns worth ``quantum`` parts each (see the
    module's docstring).  Not thread-safe: the lane calls it under its condition."""

    def __init__(self, namespace: Callable[[T], str], cost: Callable[[T], int], quantum: int) -> None:
        if quantum < 1:
            raise ValueError(f"a turn must be worth at least one part, got {quantum}")
        self._namespace, self._cost, self.quantum = namespace, cost, quantum
        self._tenants: OrderedDict[str, _Tenant[T]] = OrderedDict()  # turn order: the head's turn is now
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def append(self, item: T) -> None:
        """Queue a request behind its namespace's; a tenant with nothing queued joins at the back."""
        self._queue_of(item).append(item)
        self._count += 1

    def put_back(self, items: Iterable[T]) -> None:
        """Requests taken and not decided (their batch failed): each at the front of its namespace's
        queue, in their order, to be taken again first when their namespace's turn comes."""
        for item in reversed(list(items)):
            self._queue_of(item).appendleft(item)
            self._count += 1

    def take(self, limit: int, budget: int) -> list[T]:
        """The next batch: at most ``limit`` requests and ``budget`` parts (always one request, if any),
        in turns."""
        batch: list[T] = []
        spent = 0
        while self._tenants and len(batch) < limit:
            name, tenant = next(iter(self._tenants.items()))
            if not tenant.in_turn:
                tenant.in_turn, tenant.deficit = True, tenant.deficit + self.quantum
            cost = max(1, self._cost(tenant.head()))
            if cost > tenant.deficit:  # its turn is spent: the next tenant's
                tenant.in_turn = False
                self._tenants.move_to_end(name)
                continue
            if batch and spent + cost > budget:
                break  # the batch is full; this turn goes on in the next one
            batch.append(tenant.pop())
            self._count -= 1
            tenant.deficit -= cost
            spent += cost
            if not tenant.namespaces:
                del self._tenants[name]  # nothing queued: what its turn left is forgotten
        return batch

    def _queue_of(self, item: T) -> deque[T]:
        namespace = self._namespace(item)
        tenant = self._tenants.get(tenant_name := namespace.split("/", 1)[0])
        if tenant is None:
            tenant = self._tenants[tenant_name] = _Tenant()
        queue = tenant.namespaces.get(namespace)
        if queue is None:
            queue = tenant.namespaces[namespace] = deque()
        return queue
