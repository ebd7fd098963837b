"""One pass of the leak watcher over the cluster: read, compare, wait out the settle delay, request.

Each pass reads every namespace's topics and schemas (:mod:`deletion_service.protocol.metadata_reading`),
compares the reading with the last one (:mod:`.departures`), queues what departed (:mod:`.settle`),
and for each departure past the settle delay asks storage whether the copy is still there: a
BookKeeper ledger whose metadata node is still present, an offloaded part with an object left.
Only then is its request sent; a copy the broker did delete produces none.  The first pass only
looks: with nothing to compare against, nothing departs (a leak older than the watcher's first
sight is the scheduled scan's to find).

A namespace that cannot be read this pass keeps its previous sightings and holds back every
departure of its topics: a failed read is never evidence that a broker deleted something.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from deletion_service.leak_watcher.departures import carried, departures
from deletion_service.leak_watcher.persisted import WatcherState
from deletion_service.leak_watcher.settle import SettleQueue
from deletion_service.leak_watcher.sightings import Reading, reading_of
from deletion_service.protocol.metadata_reading import (
    UnreadableMetadata,
    namespaces,
    schemas_of_namespace,
    topics_of_namespace,
)
from deletion_service.protocol.references import TopicMetadata
from deletion_service.protocol.request import PendingDeleteLedgerInfo
from metastore.interface import MetadataStore

_log = logging.getLogger(__name__)

#: Threads listing cursors while a namespace is read.
LIST_THREADS = 8


def read_cluster(store: MetadataStore, pool: ThreadPoolExecutor) -> Reading:
    """Every topic's references now; a namespace that cannot be read is named as such."""
    metas: list[TopicMetadata] = []
    failed: list[str] = []
    for tenant, ns in namespaces(store):
        try:
            metas += [*topics_of_namespace(store, pool, tenant, ns), *schemas_of_namespace(store, tenant, ns)]
        except UnreadableMetadata as e:
            _log.warning("leak watcher: namespace %s/%s not read this pass: %s", tenant, ns, e)
            failed.append(f"{tenant}/{ns}")
    return reading_of(metas, unreadable_namespaces=failed)


@dataclass(frozen=True)
class PassResult:
    departed: int  # requests queued this pass (a departure may need several)
    requested: list[PendingDeleteLedgerInfo]  # leaks found and sent
    deleted_by_broker: int  # due departures whose copy was gone: the broker's delete worked
    unsent: int = 0  # leaks the broker did not take: kept, sent again next pass
    waiting: int = 0  # departures still waiting out the settle delay


#: ``send(requests)``: publish them; returns the ones not sent (they wait for the next pass).
Send = Callable[[Sequence[PendingDeleteLedgerInfo]], Sequence[PendingDeleteLedgerInfo]]


class LeakWatcher:
    """The watcher's state between passes: the last reading and the departures waiting to settle.

    ``still_stored(request)``: whether the copy the request names is still in storage;
    ``send``: publish requests (the mark phase's producer half).  ``state``: what a previous
    watcher kept (:mod:`.persisted`); the first pass then compares with it instead of only looking."""

    def __init__(self, store: MetadataStore, still_stored: Callable[[PendingDeleteLedgerInfo], bool],
                 send: Send, settle_s: float, clock_ms: Callable[[], int], state: WatcherState | None = None) -> None:
        self.store, self.still_stored, self.send = store, still_stored, send
        self.queue = SettleQueue(settle_s)
        self.last: Reading | None = None
        self.clock_ms = clock_ms
        if state is not None:
            self.last = state.reading
            self.queue.restore(list(state.waiting))

    def state(self) -> WatcherState | None:
        """What to keep for a successor; None before the first reading."""
        return None if self.last is None else WatcherState(self.last, tuple(self.queue.waiting()))

    def run_pass(self, now: float) -> PassResult:
        """One pass at ``now`` (seconds on the clock the settle delay is measured on)."""
        with ThreadPoolExecutor(LIST_THREADS, thread_name_prefix="leak-watcher") as pool:
            reading = read_cluster(self.store, pool)
        departed = departures(self.last, reading, self.clock_ms()) if self.last is not None else []
        self.queue.add(departed, now)
        self.queue.drop_referenced(reading)
        self.last = reading if self.last is None else carried(self.last, reading)
        due = self.queue.due(now)
        leaks = [request for request in due if self.still_stored(request)]
        unsent = list(self.send(leaks)) if leaks else []
        if unsent:  # back in line, due at once: the next pass checks and sends them again
            self.queue.restore([(now - self.queue.settle_s, request) for request in unsent])
        sent = [request for request in leaks if request not in unsent]
        for request in sent:
            _log.warning("leak watcher: %s left every reference but is still stored: requested (leaked)",
                         request.describe())
        return PassResult(sum(len(d.requests) for d in departed), sent, len(due) - len(leaks), len(unsent),
                          len(self.queue))
