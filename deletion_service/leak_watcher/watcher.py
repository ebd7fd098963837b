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
from collections import deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from deletion_service.leak_watcher.departures import carried, departures
from deletion_service.leak_watcher.persisted import WatcherState
from deletion_service.leak_watcher.settle import SettleQueue
from deletion_service.leak_watcher.sightings import Reading, TopicSightings, topic_sightings
from deletion_service.protocol.metadata_reading import (
    ManagedLedgerNodes,
    SchemaNode,
    TopicNames,
    UnreadableMetadata,
    managed_ledger_nodes,
    managed_ledgers_folder,
    namespaces,
    schema_nodes,
    schemas_folder,
)
from deletion_service.protocol.request import PendingDeleteLedgerInfo
from metastore.interface import MetadataStore, Node

_log = logging.getLogger(__name__)

#: Namespaces read ahead of the one being compared.
READ_AHEAD = 1
#: Leaks named in a pass's one log line (the rest are counted).
LOGGED_EXAMPLES = 3
#: Storage checks in flight at once (each asks BookKeeper's metadata or the offloader about one copy).
CHECK_THREADS = 32


def read_cluster(store: MetadataStore, last: Reading | None = None, names: TopicNames | None = None) -> Reading:
    """Every topic's references now; a namespace that cannot be read is named as such.

    A topic whose nodes are as ``last`` read them (the same stamp: every node's version and
    creation time) keeps ``last``'s sightings, undecoded: at a steady state, only the topics
    written since the last pass are decoded; and a managed ledger whose children did not change
    has its cursors read without listing them again.  ``names``: the topic names of earlier
    readings.  The next namespace is read while one is compared (a thread waits on the store
    while this one decodes)."""
    previous = last.topics if last is not None else {}
    names = names if names is not None else TopicNames()
    topics: dict[str, TopicSightings] = {}
    unreadable: set[str] = set()
    failed: list[str] = []
    folders: set[str] = set()
    spaces = namespaces(store)
    reader = ThreadPoolExecutor(1, thread_name_prefix="leak-watcher-read")
    try:
        ahead = deque(reader.submit(_namespace_nodes, store, tenant, ns, previous, names)
                      for tenant, ns in spaces[:READ_AHEAD])
        for i, (tenant, ns) in enumerate(spaces):
            if i + READ_AHEAD < len(spaces):
                ahead.append(reader.submit(_namespace_nodes, store, *spaces[i + READ_AHEAD], previous, names))
            folders |= {managed_ledgers_folder(tenant, ns), schemas_folder(tenant, ns)}
            try:
                managed, schemas = ahead.popleft().result()
                seen, broken = _namespace_sightings(tenant, ns, managed, schemas, previous, names)
            except UnreadableMetadata as e:
                _log.warning("leak watcher: namespace %s/%s not read this pass: %s", tenant, ns, e)
                failed.append(f"{tenant}/{ns}")
                continue
            topics.update(seen)
            unreadable |= broken
    finally:
        reader.shutdown(cancel_futures=True)
    names.keep_only(folders)
    return Reading(topics, frozenset(unreadable), frozenset(failed))


def _namespace_nodes(store: MetadataStore, tenant: str, ns: str, previous: Mapping[str, TopicSightings],
                     names: TopicNames) -> tuple[list[ManagedLedgerNodes], list[SchemaNode]]:
    """One namespace's nodes, undecoded.  Raises :class:`UnreadableMetadata`."""
    def known_cursors(path: str, node: Node) -> Sequence[str] | None:
        """The cursors the last reading listed, while the managed ledger's children did not change."""
        topic = names.known(path)
        old = previous.get(topic) if topic is not None else None
        if old is None:
            return None
        stamp = old.stamp[0] if isinstance(old.stamp, tuple) else old.stamp  # (managed ledger, schema)
        return ManagedLedgerNodes.cursor_names_in(stamp, node) if isinstance(stamp, bytes) else None

    return managed_ledger_nodes(store, tenant, ns, known_cursors), schema_nodes(store, tenant, ns)


def _namespace_sightings(tenant: str, ns: str, managed_nodes: list[ManagedLedgerNodes], schema_list: list[SchemaNode],
                         previous: Mapping[str, TopicSightings], names: TopicNames
                         ) -> tuple[dict[str, TopicSightings], set[str]]:
    """One namespace's sightings, and its topics whose references cannot be read.  Raises
    :class:`UnreadableMetadata` when a node cannot be decoded: the whole namespace is then unknown."""
    managed = dict(zip(names.of(managed_ledgers_folder(tenant, ns), managed_nodes), managed_nodes, strict=True))
    schemas = dict(zip(names.of(schemas_folder(tenant, ns), schema_list), schema_list, strict=True))
    seen: dict[str, TopicSightings] = {}
    broken: set[str] = set()
    for topic in (*managed, *(t for t in schemas if t not in managed)):
        ml, schema = managed.get(topic), schemas.get(topic)
        stamp: Hashable = ml.stamp() if schema is None and ml is not None else (
            ml.stamp() if ml is not None else None, schema.stamp() if schema is not None else None)
        old = previous.get(topic)
        if old is not None and old.stamp == stamp:
            seen[topic] = old
            continue
        metas = [node.decoded(topic) for node in (ml, schema) if node is not None]
        try:
            seen[topic] = topic_sightings(metas, stamp)
        except ValueError:  # UnreadableReference
            broken.add(topic)
    return seen, broken


@dataclass(frozen=True)
class PassResult:
    departed: int  # requests queued this pass (a departure may need several)
    requested: list[PendingDeleteLedgerInfo]  # leaks found and sent
    deleted_by_broker: int  # due departures whose copy was gone: the broker's delete worked
    unsent: int = 0  # leaks the broker did not take: kept, sent again next pass
    waiting: int = 0  # departures still waiting out the settle delay


#: ``send(requests)``: publish them; returns the ones not sent (they wait for the next pass).
Send = Callable[[Sequence[PendingDeleteLedgerInfo]], Sequence[PendingDeleteLedgerInfo]]
#: ``keep(state)``: hand the state to a successor; raises to end the pass before anything is sent.
Keep = Callable[[WatcherState], None]


class LeakWatcher:
    """The watcher's state between passes: the last reading and the departures waiting to settle.

    ``still_stored(request)``: whether the copy the request names is still in storage;
    ``send``: publish requests (the mark phase's producer half).  ``state``: what a previous
    watcher kept (:mod:`.persisted`); the first pass then compares with it instead of only looking.
    ``keep``: called once each pass has compared its reading, before a storage check or a send, with
    the state as it then is (what is due still waiting): a watcher that dies anywhere after that hands
    its successor everything this pass saw, and the successor sends again what may not have gone out."""

    def __init__(self, store: MetadataStore, still_stored: Callable[[PendingDeleteLedgerInfo], bool],
                 send: Send, settle_s: float, clock_ms: Callable[[], int], state: WatcherState | None = None,
                 keep: Keep | None = None) -> None:
        self.store, self.still_stored, self.send, self.keep = store, still_stored, send, keep
        self.queue = SettleQueue(settle_s)
        self.last: Reading | None = None
        self.clock_ms = clock_ms
        self._names = TopicNames()
        if state is not None:
            self.last = state.reading
            self.queue.restore(list(state.waiting))

    def state(self) -> WatcherState | None:
        """What to keep for a successor; None before the first reading."""
        return None if self.last is None else WatcherState(self.last, tuple(self.queue.waiting()))

    def _still_stored(self, requests: list[PendingDeleteLedgerInfo]) -> list[PendingDeleteLedgerInfo]:
        """The requests whose copy is still stored, in their order.  Checked by :data:`CHECK_THREADS`
        threads, each going through its share one check after another: at a thousand departures a
        second, one round trip after another would outlast a pass (and a store may read the checks
        asked at once together: ZooKeeper's does)."""
        if len(requests) <= 1:
            return [request for request in requests if self.still_stored(request)]
        stored: list[bool] = [True] * len(requests)
        threads = min(CHECK_THREADS, len(requests))

        def check_share(first: int) -> None:
            for i in range(first, len(requests), threads):
                stored[i] = self.still_stored(requests[i])

        with ThreadPoolExecutor(threads, thread_name_prefix="leak-watcher") as pool:
            for done in [pool.submit(check_share, first) for first in range(threads)]:
                done.result()
        return [request for request, kept in zip(requests, stored, strict=True) if kept]

    def run_pass(self, now: float) -> PassResult:
        """One pass at ``now`` (seconds on the clock the settle delay is measured on).  What is due is
        judged once the reading is compared, at ``now`` plus the time that took (on ``clock_ms``): a
        departure waits out its settle delay from the pass that saw it, not to the start of a later
        pass (which would add a whole pass to every leak's wait)."""
        started_ms = self.clock_ms()
        reading = read_cluster(self.store, self.last, self._names)
        departed = departures(self.last, reading, self.clock_ms()) if self.last is not None else []
        refused = [d for d in departed if d.unrequestable and not d.requests]
        if refused:
            _log.warning("leak watcher: %d departed ledger(s) get no request, e.g. %d of %s: %s", len(refused),
                         refused[0].ledger_id, refused[0].topic, refused[0].unrequestable)
        self.queue.add(departed, now)
        self.queue.drop_referenced(reading)
        self.last = reading if self.last is None else carried(self.last, reading)
        if self.keep is not None:
            self.keep(WatcherState(self.last, tuple(self.queue.waiting())))
        due = self.queue.due(now + max(0, self.clock_ms() - started_ms) / 1000, reading.knows)
        try:
            leaks = self._still_stored(due)
            unsent = list(self.send(leaks)) if leaks else []
        except BaseException:  # a check or the send failed (or the pass is stopped): the due stay due
            self.queue.restore([(now - self.queue.settle_s, request) for request in due])
            raise
        if unsent:  # back in line, due at once: the next pass checks and sends them again
            self.queue.restore([(now - self.queue.settle_s, request) for request in unsent])
        sent = [request for request in leaks if request not in unsent]
        if sent:  # one line a pass, however many: each leak's request is in the audit trail by its outcome
            examples = "; ".join(request.describe() for request in sent[:LOGGED_EXAMPLES])
            more = f" and {len(sent) - LOGGED_EXAMPLES} more" if len(sent) > LOGGED_EXAMPLES else ""
            _log.warning("leak watcher: %d copy(ies) left every reference but are still stored: requested (leaked): "
                         "%s%s", len(sent), examples, more)
        return PassResult(sum(len(d.requests) for d in departed), sent, len(due) - len(leaks), len(unsent),
                          len(self.queue))
