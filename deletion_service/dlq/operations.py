"""The dead-letter queue, for operators: list (reads, never acks), purge (acks), requeue (republishes, then acks).

**Listing never takes anything.**  It reads each DLQ topic with a Reader (its own non-durable
cursor), not through the ``ledger-deletion-dlq`` subscription: a consumer that lists holds the
messages dispatched to it, so two listings at once (an operator and the admin API) each saw
part of the DLQ, often none of it.  A read lists each stored message once, whatever the broker
delivers twice to a reader (``BrokerClient.read_all``), so listings, the daemon's ``dlq_size`` refresh
and a requeue may all read at once; the DLQs of a scope are read side by side (:func:`snapshots`).

**Which DLQs.**  A *scope* is a list of :class:`DeletionTopics`: one namespace's, or everything
a deployment serves (the cluster's topics and, in namespace scope, every namespace's; see
:mod:`deletion_service.protocol.scope`).  Ledger ids, hence message ids, are unique across topics, so an
id names one parked message whatever the scope.

**Settled requests are recorded in the topic.**  A reader sees every stored message, settled
or not, and a client cannot see a subscription's acks (real Pulsar shows them only through
admin REST, pulsar-lite not at all).  Purge and requeue are what ack the DLQ subscription, so
after acking they append a *settlement marker* to the DLQ topic itself and ack the marker too,
so the subscription's backlog — the ``dlq_size`` gauge — never counts it.  A marker is signed
(:mod:`deletion_service.dlq.marker`): a message that merely carries the marker property is an
ordinary parked message, listed like any other.  The marker lives after the messages it
settles, so the broker never trims it while they remain.

**What a parked message says is shown only when this tool wrote it.**  In namespace scope any tenant
may produce to its own DLQ, choosing every property: its ``reason``, ``lastError`` and
``RECONSUMETIMES`` would be words and figures on an operator's screen.  So the daemon seals them
with the copy's body and topic family (:class:`~deletion_service.delete_phase.rules.seal.ParkedSeal`,
the key of the markers), and a listing shows them only when the seal holds; any other parked
message is listed all the same (it is parked: that is a fact) with reason :data:`~.reasons.UNSEALED`,
no last error, 0 attempts and ``sealed`` false.  It can be filtered (``--reason unsealed``), purged
and requeued like any other: a requeue sends it to its own DLQ's request topic, where the daemon
decides it from the facts and, if it parks it again, says why under its seal.

**Every message is listed, whatever its bytes and properties.**  Reading an entry never raises:
an undecodable body is shown as such (its bytes in ``payloadBase64`` when they fit), garbled
properties as empty, so purge can always remove by id what nothing else can parse.

**Order, and what a crash leaves.**  Ack the selected messages, then send the marker, then ack
the marker.  A crash after the first step leaves settled messages listed (purging them again is
harmless: an ack is idempotent); after the second, a marker counted in the backlog until the
next purge or requeue, which acks every marker it reads.  Requeue republishes before it acks,
so a crash can duplicate a request (the daemon handles a repeat), never lose one.  An ack the
broker refuses does not stop the marker: on pulsar-lite a tenant can make acking its own DLQ fail
for good (its consumers take the ids this process would use), and without the marker every
``requeue`` sent those requests back again.  Marked, they are settled for every listing, the
gauge and the next requeue; they stay in the subscription's backlog until a later purge or
requeue acks them (each re-acks every settled message it reads).

**Requeue goes back where the request came from, never where it says.**  A parked request returns
to the request topic of the DLQ it is parked in (in namespace scope a DLQ belongs to exactly one
namespace; the cluster's DLQ to the cluster's topics, on the request's partition), never routed by
its own ``topicName``: routed by its claim, a request dead-lettered as ``cross-namespace`` in
t1/ns1 would land on t2/ns2's topic and be deleted.  There the daemon decides
again under that topic's scope.  Refusals retrying cannot change (:data:`STAYS_PARKED`, and any
reason this tool does not write) stay parked when selected by ``--reason``, ``--older-than`` or
``--all``; they go back only when the operator names them by id.

**What is acted on** is exactly what a :class:`Selection` names among the requests listed at
that moment — message ids as ``dlq list`` prints them (``L:E``), ``--reason``, ``--older-than``,
or everything listed — never whatever arrives while it runs.  A requeued request gets a fresh
retry budget (its retry properties are dropped) because an operator requeues after fixing the
cause.  A subscription acked by other means (``pulsar-admin topics clear-backlog``) leaves no
marker, so its messages stay listed.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from deletion_service.broker.interface import BrokerClient, BrokerError, Received, display_message_id
from deletion_service.broker.publisher import RequestPublisher
from deletion_service.delete_phase.consumer.copies import (
    DLQ_LAST_ERROR,
    DLQ_REASON,
    MAX_DLQ_BODY,
    PARKED_SEAL,
    RECONSUMETIMES,
    SETTLED_MARKER,
)
from deletion_service.delete_phase.rules.decision import Kind
from deletion_service.delete_phase.rules.seal import ParkedSeal
from deletion_service.dlq.marker import MarkerKey
from deletion_service.dlq.reasons import UNSEALED
from deletion_service.protocol.request import PendingDeleteLedgerInfo, decode
from deletion_service.protocol.topics import DeletionTopics

_log = logging.getLogger(__name__)

#: The property that names a settlement marker (it counts only when signed: see ``dlq_marker``).
MARKER_PROPERTY = SETTLED_MARKER
#: Refusals that retrying cannot change: a filter (``--reason``, ``--older-than``, ``--all``) never
#: requeues them.  ``cannot-verify``: the metadata or index says too little to delete on; an
#: operator who fixed that names the request by id.
STAYS_PARKED = frozenset({Kind.CROSS_NAMESPACE, Kind.INVALID_REQUEST, Kind.CANNOT_VERIFY})
#: Reasons a filter may requeue: the kinds this tool writes, less those above ("failed": an older
#: daemon's word for a DLQ verdict without a kind), and ``unsealed`` (why it was parked is not known,
#: so it may be anything retrying changes; the daemon decides it again under its DLQ's own scope, and
#: what it parks again carries a sealed reason).  Any other reason is not ours: it stays parked.
REQUEUED_BY_FILTER = frozenset({k.value for k in Kind if k not in STAYS_PARKED and k != Kind.NONE}
                               | {"failed", UNSEALED})
#: The reason and last error as listed: a parked message's properties are anyone's, so bounded.
MAX_REASON_CHARS = 200
MAX_ERROR_CHARS = 2000
#: DLQs one listing reads at once (:func:`snapshots`).
READERS = 16


@dataclass
class DlqEntry:
    message_id: str  # L:E, as operators type it back to purge or requeue
    published_ms: int
    reason: str
    last_error: str
    attempts: int
    request: dict | None  # the decoded request, None when undecodable
    payload_base64: str | None
    topic: str = ""  # the DLQ topic it is parked on
    #: this tool parked it and sealed its reason, last error and attempts; else they read
    #: ``unsealed``, "" and 0 (a producer's own words are never shown)
    sealed: bool = False

    def to_json(self) -> dict:
        return {"messageId": self.message_id, "publishedAt": self.published_ms, "reason": self.reason,
                "lastError": self.last_error, "attempts": self.attempts, "request": self.request,
                "payloadBase64": self.payload_base64, "topic": self.topic, "sealed": self.sealed}

    @property
    def requeued_by_filter(self) -> bool:
        """Whether ``--reason``/``--older-than``/``--all`` may send it back (see :data:`STAYS_PARKED`)."""
        return self.request is not None and self.reason in REQUEUED_BY_FILTER


@dataclass(frozen=True)
class Selection:
    """Which listed requests to act on: those with these ids (if any given) that also match every
    filter given.  ``everything`` must be said explicitly; an empty selection selects nothing."""

    message_ids: frozenset[str] = frozenset()
    reason: str | None = None
    published_before_ms: int | None = None
    everything: bool = False

    @property
    def empty(self) -> bool:
        return not (self.message_ids or self.reason or self.published_before_ms is not None or self.everything)

    def matches(self, e: DlqEntry) -> bool:
        if self.empty:
            return False
        return ((not self.message_ids or e.message_id in self.message_ids)
                and (self.reason is None or e.reason == self.reason)
                and (self.published_before_ms is None or e.published_ms < self.published_before_ms))

    def names(self, e: DlqEntry) -> bool:
        """The operator named this very message by its id."""
        return e.message_id in self.message_ids


class UnknownMessageIds(Exception):
    """Ids the operator named that are not parked (any more): nothing was done."""

    def __init__(self, missing: list[str]) -> None:
        super().__init__(f"not in the DLQ: {', '.join(missing)} (run 'dlq list' again; nothing was changed)")
        self.missing = missing


def entry(message: Received, dlq_topic: str = "", seal: ParkedSeal | None = None) -> DlqEntry:
    """One parked message as listed: its reason, last error and attempts only when ``seal`` proves this
    tool parked it with them (else ``unsealed``, "" and 0).  Never raises, whatever its bytes and properties."""
    props = message.properties if isinstance(message.properties, dict) else {}
    request, payload = _decoded(message.data)
    reason, last_error, count = (props.get(k) for k in (DLQ_REASON, DLQ_LAST_ERROR, RECONSUMETIMES))
    sealed = (seal or ParkedSeal(None)).proves(reason, last_error, count, props.get(PARKED_SEAL),
                                               dlq_topic or str(message.topic), message.data)
    shown = (_text(reason, MAX_REASON_CHARS), _text(last_error, MAX_ERROR_CHARS), _count(count)) if sealed \
        else (UNSEALED, "", 0)
    return DlqEntry(display_message_id(str(message.message_id)), int(message.publish_time_ms), *shown,
                    request, payload, dlq_topic, sealed)


def _count(value: object) -> int:
    try:
        return max(0, int(str(value)[:20]))
    except ValueError:
        return 0


def _decoded(data: bytes) -> tuple[dict | None, str | None]:
    """The request as JSON, or ``None`` and the raw bytes (base64, when no larger than a DLQ copy's body)."""
    try:
        return decode(data).model_dump(mode="json", by_alias=True), None
    except Exception:  # noqa: BLE001 - decode promises InvalidRequest only; a listing trusts no promise
        return None, base64.b64encode(data).decode() if len(data) <= MAX_DLQ_BODY else None


def _text(value: object, limit: int) -> str:
    return value[:limit] if isinstance(value, str) else ""


@dataclass
class Snapshot:
    """One DLQ topic as one read saw it: parked messages (oldest first) and the markers read."""

    topics: DeletionTopics
    parked: list[Received] = field(default_factory=list)
    markers: list[str] = field(default_factory=list)
    #: stored messages a marker settles: acked again by the next purge or requeue (an ack refused earlier)
    settled: list[str] = field(default_factory=list)
    seal: ParkedSeal = field(default_factory=lambda: ParkedSeal(None))  # proves what the daemon parked

    def entries(self) -> list[tuple[DlqEntry, Received]]:
        return [(entry(m, self.topics.dlq, self.seal), m) for m in self.parked]


def snapshot(broker: BrokerClient, topics: DeletionTopics, key: MarkerKey) -> Snapshot:
    """Every message on ``topics.dlq``, sorted out (:func:`sort_out`)."""
    return sort_out(topics, broker.read_all(topics.dlq), key)


def snapshots(broker: BrokerClient, scope: Sequence[DeletionTopics], key: MarkerKey) -> list[Snapshot]:
    """:func:`snapshot` of every DLQ in ``scope``, in scope order, at most :data:`READERS` read at once.

    Why at once: an unscoped listing reads every namespace's DLQ, most of them empty, and an empty
    DLQ is a wait for messages that never come (short, but thousands of them one after another took
    minutes).  Why bounded: each read holds a reader on the broker.  The first failure is the
    listing's (the reads under way finish first; nothing is acted on)."""
    if len(scope) <= 1:
        return [snapshot(broker, t, key) for t in scope]
    with ThreadPoolExecutor(max_workers=min(READERS, len(scope)), thread_name_prefix="dlq-read") as pool:
        return list(pool.map(lambda t: snapshot(broker, t, key), scope))


def sort_out(topics: DeletionTopics, stored: list[Received], key: MarkerKey) -> Snapshot:
    """Signed markers (and the ids they settle) apart, every other message parked: a message is hidden
    only when a marker this tool signed for this DLQ names it."""
    settled: set[str] = set()
    out = Snapshot(topics, seal=key.parked_seal())
    marker_ids: set[str] = set()
    for message in stored:
        ids = key.settled_by(topics.dlq, message)
        if ids is not None:
            marker_ids.add(display_message_id(message.message_id))
            settled.update(ids)
    out.markers = sorted(marker_ids)
    out.parked, stored_settled = [], []
    for m in stored:
        shown = display_message_id(m.message_id)
        if shown in settled:
            stored_settled.append(shown)
        elif shown not in marker_ids:
            out.parked.append(m)
    out.settled = stored_settled
    return out


def _entries(snaps: Iterable[Snapshot]) -> list[tuple[DlqEntry, Received, Snapshot]]:
    """Every parked message of every DLQ in scope, oldest first."""
    rows = [(e, m, s) for s in snaps for e, m in s.entries()]
    return sorted(rows, key=lambda row: row[0].published_ms)


def list_dlq(broker: BrokerClient, scope: Sequence[DeletionTopics], key: MarkerKey, limit: int | None = None,
             selection: Selection | None = None) -> list[DlqEntry]:
    """The parked requests of every DLQ in ``scope``, oldest first (only those ``selection`` names, when given)."""
    entries = [e for e, _, _ in _entries(snapshots(broker, scope, key))
               if selection is None or selection.matches(e)]
    return entries if limit is None else entries[:limit]


def _select(snaps: list[Snapshot], selection: Selection) -> list[tuple[DlqEntry, Received, Snapshot]]:
    rows = _entries(snaps)
    missing = sorted(selection.message_ids - {e.message_id for e, _, _ in rows})
    if missing:
        raise UnknownMessageIds(missing)
    return [row for row in rows if selection.matches(row[0])]


def _settle(broker: BrokerClient, snap: Snapshot, key: MarkerKey, ids: list[str], why: str) -> str | None:
    """Ack, then record, then ack the record (see the module's docstring for the order); an ack the
    broker refuses does not stop the record.  Returns why the broker refused an ack of ``ids`` or of
    their record (they are settled all the same), else None; raises when the record is not written."""
    topics = snap.topics
    refused: str | None = None
    if ids or snap.markers or snap.settled:
        try:
            broker.acknowledge(topics.dlq, topics.dlq_subscription, ids, likely_acked=snap.markers + snap.settled)
        except BrokerError as e:
            if not ids:
                raise
            refused = str(e)
    if not ids:
        return None
    producer = broker.producer(topics.dlq)
    try:
        markers = [producer.send(body, {MARKER_PROPERTY: why}) for body in key.bodies(topics.dlq, ids)]
    finally:
        producer.close()
    try:
        broker.acknowledge(topics.dlq, topics.dlq_subscription, markers)
    except BrokerError as e:
        refused = refused or str(e)
    return refused


def _settle_each(broker: BrokerClient, snaps: Sequence[Snapshot], key: MarkerKey,
                 ids_of: Callable[[Snapshot], list[str]], why: str) -> None:
    """:func:`_settle` every DLQ in scope; one that fails stops none of the others.  Why: on pulsar-lite a
    tenant can make acking its own DLQ fail (its consumers take the ids this process would use), and one
    failing DLQ left every DLQ after it unsettled.  A refused ack with the marker written is said, not
    failed: the requests are settled.  A DLQ with nothing selected only re-acks what an earlier crash or
    refusal left counted: its failure is said and costs nothing else (the next purge or requeue acks
    them).  Raises at the end, naming the DLQs whose selected requests stay parked (no marker written)."""
    failed: list[str] = []
    for snap in snaps:
        ids = ids_of(snap)
        try:
            refused = _settle(broker, snap, key, ids, why)
            if refused is not None:
                _log.warning("%s: %d request(s) on %s are settled (a signed marker hides them from every listing "
                             "and requeue), but the broker refused their acknowledgement (%s); they stay in the "
                             "subscription's backlog until a later purge or requeue acks them",
                             why, len(ids), snap.topics.dlq, refused)
        except BrokerError as e:
            if not ids:
                _log.warning("%s: re-acking the settlement markers on %s failed (%s); the next purge or requeue "
                             "acks them", why, snap.topics.dlq, e)
                continue
            failed.append(f"{snap.topics.dlq} ({len(ids)} selected): {e}")
    if failed:
        again = ("run it again: what it sent back is sent again, and the daemon settles the repeat"
                 if why == "requeue" else "run it again")
        raise BrokerError(f"{why}: {len(failed)} of {len(snaps)} DLQs could not be settled and keep their "
                          f"selected requests listed, the others were settled; {again}. "
                          + "; ".join(failed[:3]) + (f"; and {len(failed) - 3} more" if len(failed) > 3 else ""))


@dataclass(frozen=True)
class Settling:
    """One parked request a purge or requeue is about to ack: what the audit trail records of it."""

    entry: DlqEntry
    message: Received
    dlq: str  # the DLQ topic it leaves
    sent_to: str | None = None  # requeue: the request topic it went back to
    sent_as: str | None = None  # … and its message id there (L:E), which the daemon's record will name


#: Records what a purge or requeue settles, before anything is acked; raising leaves it all parked.
Recorder = Callable[[list[Settling]], None]


def purge(broker: BrokerClient, scope: Sequence[DeletionTopics], key: MarkerKey, selection: Selection,
          progress: Callable[[int], None] | None = None, record: Recorder | None = None) -> list[DlqEntry]:
    """Ack the selected requests; their ledgers stay where they are.  ``record`` is handed every one of
    them before the first ack (a record may repeat when a purge is retried, never be missing)."""
    snaps = snapshots(broker, scope, key)
    chosen = _select(snaps, selection)
    if record is not None and chosen:
        record([Settling(e, m, s.topics.dlq) for e, m, s in chosen])
    _settle_each(broker, snaps, key, lambda snap: [e.message_id for e, _, s in chosen if s is snap], "purge")
    if progress:
        progress(len(chosen))
    return [e for e, _, _ in chosen]


@dataclass
class Requeued:
    """What a requeue did: sent back to their origin, kept (undecodable), kept (retrying cannot help)."""

    moved: list[DlqEntry] = field(default_factory=list)
    undecodable: list[DlqEntry] = field(default_factory=list)
    refused: list[DlqEntry] = field(default_factory=list)


def requeue(broker: BrokerClient, scope: Sequence[DeletionTopics], key: MarkerKey, publisher: RequestPublisher,
            selection: Selection, progress: Callable[[int], None] | None = None,
            record: Recorder | None = None) -> Requeued:
    """Republish the selected requests to the request topic of the DLQ each is parked in (its origin),
    then ack them.  Undecodable ones stay parked; so do refusals retrying cannot change, unless named by id.
    ``record`` is handed the requests sent back after they are sent and before the first ack, as the
    daemon records a deletion between doing it and acking its request."""
    snaps = snapshots(broker, scope, key)
    out = Requeued()
    moved: dict[int, list[str]] = {id(s): [] for s in snaps}
    sent: list[Settling] = []
    for e, message, snap in _select(snaps, selection):
        request = _request(message)
        if request is None:
            out.undecodable.append(e)
            continue
        if not (selection.names(e) or e.requeued_by_filter):
            out.refused.append(e)
            continue
        destination = snap.topics.partition_for(request.ledger_id)
        receipt = publisher.send_request_to(snap.topics, request)
        sent.append(Settling(e, message, snap.topics.dlq, destination, display_message_id(receipt)))
        out.moved.append(e)
        moved[id(snap)].append(e.message_id)
        if progress:
            progress(len(out.moved))
    if record is not None and sent:
        record(sent)
    _settle_each(broker, snaps, key, lambda snap: moved[id(snap)], "requeue")
    return out


def _request(message: Received) -> PendingDeleteLedgerInfo | None:
    try:
        return decode(message.data)
    except Exception:  # noqa: BLE001 - as in _decoded: whatever fails to decode stays parked
        return None
