"""The offload lane: tiered-storage requests verified and deleted on their own threads.

Were offload and BookKeeper requests to share a batch, then with the S3
endpoint hung each offload request would cost about 20 s and no BookKeeper
ledger would be deleted for a minute, while ``/readyz`` said 200 and nothing
was logged.  So the worker hands each batch's offload requests to this lane and
goes on with the BookKeeper ones; decided requests come back to the worker
thread, which alone publishes and acks (one thread owns the dispositions).

One breaker for the whole lane would let one request stop it: a forged
request naming an endpoint that never answers would open it, with itself as
the probe, and no genuine copy would be deleted again.  So every target (driver family,
endpoint, bucket) has its own breaker (:class:`.breaker.TargetBreakers`), and a
target that does not answer costs its own requests only:

* **Two threads.**  Requests whose every target has answered before run in
  batches on the main thread; requests naming a target that never answered in
  this process (a new bucket, or a forged endpoint) run one at a time on the
  probation thread, inline, so a hung endpoint ties up neither the main thread
  nor the shared pool of storage calls.  Once a target answers, its requests
  move to the main thread.
* **Held, then parked.**  A request whose target is down (its breaker open)
  is not sent to storage.  For up to ``hold_s`` after the breaker opened it is
  held here, unacked and uncounted (an outage of our S3 spends no retries), at
  most ``hold_per_target`` per target and ``capacity`` in all, none of it
  counted against the room other targets' requests get.  A target still down
  after that parks its requests: reconsumed later with the reason, each time
  counted, so a target that never answers sends its requests to the DLQ after
  the retry budget instead of keeping them here for good.  Its breaker closing
  runs what is held at once.

The lane holds at most ``capacity`` undecided requests (and a spare of a tenth
more for tenants under their fair share: :mod:`.admission`); the worker defers
offload requests beyond that to RETRY with their attempts unchanged, so an
outage can neither fill memory nor block BookKeeper deletions.

**Turns.**  Both threads take their requests in turns (:mod:`.turns`): tenant by
tenant, namespace by namespace, each turn worth :data:`QUANTUM` parts of storage
calls, each batch at most :data:`BATCH_PARTS`; so one namespace's queue of
expensive requests delays another namespace's by one turn, not by the queue.  A
request naming more parts than one request may costs no storage call at all
(``storage/offload_cost.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence

from deletion_service.delete_phase.consumer.copies import attempts, grace_since
from deletion_service.delete_phase.offload.admission import Admission, Admitted
from deletion_service.delete_phase.offload.turns import Turns
from deletion_service.delete_phase.pipeline import DeletePipeline
from deletion_service.delete_phase.rules.decision import Action, Policy
from deletion_service.delete_phase.rules.lifecycle import MessageInHand
from deletion_service.delete_phase.storage.breaker import TargetBreakers
from deletion_service.delete_phase.storage.offload_cost import MAX_PARTS_CHECKED, storage_cost
from deletion_service.delete_phase.storage.offload_index import offload_target_keys
from deletion_service.protocol.topics import namespace_of_topic, tenant_of_topic

_log = logging.getLogger(__name__)

#: How long requests of a target that stopped answering are held (uncounted) before they are parked.
HOLD_S = 300.0
#: What one tenant's turn is worth, in parts (storage calls).  Less than the dearest request, which so
#: waits several turns: a round of turns is then a few parts per tenant, not 65, and a tenant's few
#: cheap copies wait for one round of that, not for a dear request of every other tenant (60 tenants
#: sending 65-part requests held another's 10 genuine copies 68 s with a turn of 65 parts).
QUANTUM = 8
#: What one batch may cost, in parts: a hundred single-part requests fit, two of the dearest do.
BATCH_PARTS = 2 * MAX_PARTS_CHECKED


def _per_tenant(by_topic: Counter[str]) -> Counter[str]:
    """A per-topic count summed by the topics' tenants."""
    out: Counter[str] = Counter()
    for topic, n in by_topic.items():
        out[tenant_of_topic(topic)] += n
    return out


def _turns() -> Turns[MessageInHand]:
    return Turns(lambda p: namespace_of_topic(p.admitted.topic_name), lambda p: storage_cost(p.admitted), QUANTUM)


class OffloadLane:
    """Undecided offload requests in (each a :class:`~.lifecycle.MessageInHand` the worker sent to the lane),
    decided ones out."""

    def __init__(self, pipeline: DeletePipeline, policy: Policy, breakers: TargetBreakers,
                 capacity: int = 2_000, batch_size: int = 100, hold_s: float = HOLD_S) -> None:
        self.pipeline, self.policy, self.breakers = pipeline, policy, breakers
        self.capacity, self.batch_size, self.hold_s = capacity, batch_size, hold_s
        self.hold_per_target = max(1, capacity // 10)
        self._inbox = _turns()  # targets that answered before: batches, main thread
        self._probation = _turns()  # a target never seen answering: one at a time
        #: target key -> requests waiting for it to answer, each with the (transient) action it met
        self._held: dict[str, list[tuple[MessageInHand, Action]]] = {}
        self._outbox: list[MessageInHand] = []
        self._disposing = 0  # decided requests the worker took and has not yet said it disposed of
        #: topic -> requests in the lane from it (submitted, not yet handed back by :meth:`finished`)
        self._topics: Counter[str] = Counter()
        #: topic -> the parts (storage calls, ``offload_cost``) its requests in the lane cost
        self._parts: Counter[str] = Counter()
        self._door = Admission()  # who is taken in: the worker's thread alone asks
        #: whether deletes may go on (the worker's: not while the audit trail refuses records)
        self.may_delete: Callable[[], bool] = lambda: True
        self._working = 0
        self._quiescing = False  # a graceful stop: take nothing new, finish what is in hand
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop, args=(self._inbox, batch_size), name="offload-lane",
                                          daemon=True),
                         threading.Thread(target=self._loop, args=(self._probation, 1),
                                          name="offload-lane-probation", daemon=True)]
        for thread in self._threads:
            thread.start()

    @property
    def held(self) -> int:
        with self._cond:
            return sum(map(len, self._held.values()))

    @property
    def in_flight(self) -> int:
        with self._cond:
            return (len(self._inbox) + len(self._probation) + self._working + len(self._outbox)
                    + sum(map(len, self._held.values())))

    def room(self) -> int:
        """Room for new requests: what is held for a down target has a budget of its own.  Below 0 once
        the spare of tenants under their share is in use (:mod:`.admission`)."""
        with self._cond:
            busy = len(self._inbox) + len(self._probation) + self._working + len(self._outbox)
        return self.capacity - busy

    def admit(self, arriving: Sequence[MessageInHand], now: float) -> Admitted[MessageInHand]:
        """Which of ``arriving`` the lane would take in, tenant by tenant (:mod:`.admission`); the caller
        submits the taken and defers the rest.  ``now``: a monotonic clock's seconds."""
        with self._cond:  # the requests each tenant has in the lane (not yet taken back), and their parts
            held, parts = _per_tenant(self._topics), _per_tenant(self._parts)
        return self._door.admit(arriving, lambda d: tenant_of_topic(d.message.topic),
                                lambda d: storage_cost(d.admitted), held, parts, self.room(), self.capacity,
                                MAX_PARTS_CHECKED, now)

    def topics(self) -> set[str]:
        """The topics of the requests in the lane, queued, under way, held for a target or decided and not
        yet taken back: unacknowledged on purpose, however long a slow or down target keeps them."""
        with self._cond:
            return set(self._topics)

    def submit(self, items: list[MessageInHand]) -> None:
        with self._cond:
            for p in items:
                self._queue_for(p).append(p)
                self._topics[p.message.topic] += 1
                self._parts[p.message.topic] += storage_cost(p.admitted)
            self._cond.notify_all()

    def finished(self) -> list[MessageInHand]:
        """Decided requests, for the worker thread to publish and ack; it says :meth:`disposed` when it
        has (the next batch's deletes wait for that)."""
        with self._cond:
            out, self._outbox = self._outbox, []
            self._disposing += len(out)
            for p in out:
                self._topics[p.message.topic] -= 1
                self._parts[p.message.topic] -= storage_cost(p.admitted)
                if self._topics[p.message.topic] <= 0:
                    del self._topics[p.message.topic]
                    self._parts.pop(p.message.topic, None)
            return out

    def disposed(self, count: int) -> None:
        """The worker has disposed of (recorded, acked, or left for another try) ``count`` of those
        :meth:`finished` gave it."""
        if not count:
            return  # nothing taken back: waking the lane's threads on every pass of the worker costs it the GIL
        with self._cond:
            self._disposing -= count
            self._cond.notify_all()

    def _may_go_on(self) -> bool:
        """(Under the condition.)  Nothing decided here waits for its record, and deletes may go on."""
        return not self._outbox and not self._disposing and self.may_delete()

    def down(self) -> str | None:
        """For ``/readyz``: targets that answered before and do not now."""
        return self.breakers.describe()

    def quiesce(self, wait_s: float) -> int:
        """A graceful stop: take nothing new, and wait up to ``wait_s`` for the batches in hand to be
        decided (then :meth:`finished` has them).  Returns how many are still in hand.

        Without the wait, a SIGTERMed replica could exit while the store was answering its offload
        delete: applied, recorded by nobody.  What is queued or held stays unacked (redelivered)."""
        deadline = time.monotonic() + wait_s
        with self._cond:
            self._quiescing = True
            self._cond.notify_all()
            while self._working and (left := deadline - time.monotonic()) > 0:
                self._cond.wait(left)
            return self._working

    def stop(self, wait_s: float) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(wait_s)
        self.breakers.close()

    def _queue_for(self, p: MessageInHand) -> Turns[MessageInHand]:
        keys = offload_target_keys(p.admitted)
        return self._inbox if all(self.breakers.has_answered(k) for k in keys) else self._probation

    def _take(self, queue: Turns[MessageInHand], limit: int) -> list[MessageInHand]:
        """The next batch, in turns (:mod:`.turns`), once the requests this lane decided before are
        recorded (taken back and disposed of by the worker) and the worker lets deletes go on: a daemon
        killed, or a trail that refuses records, leaves at most the batches in hand deleted and
        unrecorded, as for BookKeeper."""
        with self._cond:
            if not queue or self._quiescing or not self._may_go_on():
                self._cond.wait(0.2)
            if self._quiescing or not self._may_go_on():
                return []
            batch = queue.take(limit, BATCH_PARTS)
            self._working += len(batch)
            return batch

    def _loop(self, queue: Turns[MessageInHand], limit: int) -> None:
        while not self._stop.is_set():
            self.breakers.tick()
            self._release_held()
            batch = self._take(queue, limit)
            if not batch:
                continue
            try:
                done = self._run(batch)
            except Exception:  # noqa: BLE001 - the lane outlives any batch; its requests go back unacked
                _log.exception("offload lane: a batch of %d failed; they are decided again", len(batch))
                done = []
                with self._cond:
                    queue.put_back(batch)
            with self._cond:
                self._outbox.extend(done)
                self._working -= len(batch)
                if self._quiescing:
                    self._cond.notify_all()  # quiesce() waits for this

    def _run(self, batch: list[MessageInHand]) -> list[MessageInHand]:
        actions = self.pipeline.run([p.admitted for p in batch], [attempts(p.message) for p in batch], self.policy,
                                    [grace_since(p.message) for p in batch])
        decided = []
        for p, action in zip(batch, actions, strict=True):
            if not (action.transient and self._hold(p, action)):
                p.decide(action)  # a transient failure not held: reconsumed (counted) with its reason
                decided.append(p)
        return decided

    def _hold(self, p: MessageInHand, action: Action) -> bool:
        """Keep a request whose target is down (one probe confirms it), if it may still wait here."""
        keys = offload_target_keys(p.admitted)
        down = next((k for k in keys if self.breakers.confirm_down(k)), None)
        if down is None:
            return False  # every target answers: the failure was the request's own
        opened_for = self.breakers.opened_for_s(down) or 0.0
        with self._cond:
            held = self._held.setdefault(down, [])
            if (opened_for >= self.hold_s or len(held) >= self.hold_per_target
                    or sum(map(len, self._held.values())) >= self.capacity):
                return False  # parked: reconsumed later, counted, to the DLQ after the retry budget
            held.append((p, action))
            return True

    def _release_held(self) -> None:
        """Held requests whose target answers again run now; those held past ``hold_s`` are parked.

        Wakes the lane's threads only when it released something: waking them on every pass made
        the two threads wake each other all the time (each pass of one is a notify to the other),
        which took the GIL from the worker with no offload request in sight."""
        with self._cond:
            released = False
            for key in list(self._held):
                opened_for = self.breakers.opened_for_s(key)
                if opened_for is not None and opened_for < self.hold_s:
                    continue
                items = self._held.pop(key)
                if opened_for is None:  # closed: decided again, where its targets now belong
                    for p, _ in items:
                        self._queue_for(p).append(p)
                else:
                    _log.warning("offload target %s still not answering after %.0f s: parking its %d held "
                                 "request(s) (reconsumed, counted)", key, opened_for, len(items))
                    for p, action in items:
                        p.decide(action)
                        self._outbox.append(p)
                released = True
            if released:
                self._cond.notify_all()
