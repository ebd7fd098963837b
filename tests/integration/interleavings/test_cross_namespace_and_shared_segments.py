"""Randomized interleavings of more shapes: cross-namespace requeues and shared segments.

One run, namespace scope (``ledgerDeletionTopicScope = "namespace"``), two tenants (``t1-…/ns`` and
``t2-…/ns``, unique per run), each with two topics, everything real: ZooKeeper (metadata and
BookKeeper's tree in their own chroots), pulsar-lite, moto_server with two buckets, the real
``Daemon`` over ``LedgerDeletionService`` serving both namespaces, the real ``trim`` and
``reset_stored_cursor``, and the DLQ library functions (``deletion_service.dlq.operations``: list, requeue,
purge) called as the CLI calls them, by concurrent "operators".

Each round a quiet "broker" step grows some topics: new ledgers, an unlisted orphan (requested by
its own namespace, as ``scan-orphans --enqueue`` would) or an unlisted *bait* ledger (requested by
nobody of its own namespace), and a streaming-offload segment holding 2-3 consecutive listed
ledgers (sometimes sharing its first ledger with the previous segment, as consecutive streaming
segments do; sometimes written to the second bucket, recorded in the segment's own driver
metadata).  Then, concurrently: trims, cursor resets, forgers writing to one namespace's topics
requests that name the *other* tenant's ledgers (to the request topic, to RETRY with a spent retry
budget, straight into its own DLQ with a retryable reason, and garbage), and operators requeueing
by ``--reason`` (``cross-namespace`` included), by ``--all`` and by id, and purging, on one
namespace's DLQ or unscoped (everything served).

Invariants, judged by the test's own bookkeeping and :mod:`tests.support.safety_checker` (no product code):

* tenancy: every deletion was of a ledger of the namespace whose topic the request was read from
  (``Settled.message.topic``, the broker's word) *and* where the request was first sent (its origin:
  a requeue must never carry it elsewhere); a request that names another tenant's ledger ends only
  in the DLQ, however often it is requeued; a bait ledger is never deleted;
* the usual: never a referenced ledger deleted (observed all along), only what trim removed or an
  orphan's own namespace asked for is gone, no leak after the drain, every request ended, the daemon
  idle, nothing unacked, and every message left on a DLQ's subscription is listed (hidden 0);
* segments: never deleted while a ledger its index holds is listed (observed all along, objects read
  before the lists); after the drain, gone exactly when all of its ledgers were trimmed.

A second replica serves the same namespaces on the same subscription, its offload claims judged by a
clock :data:`SKEW_S` ahead of the first's (inside ``MAX_CLOCK_SKEW_S``): an in-process clock on its
claims, where two replicas' clocks meet on one copy (libfaketime would move every actor of this
process).  Both replicas' ends are judged together, and no copy or ledger is recorded deleted twice.

``SCOPES_SEED``, ``SCOPES_ROUNDS`` and ``SCOPES_BUDGET_S`` (seconds of rounds before no new one starts,
once five ran and one trim removed a ledger) are
printed; the suite runs 30 rounds, ``scripts/soak_long.sh`` longer runs.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from deletion_service.broker.interface import Producer
from deletion_service.broker.publisher import RequestPublisher
from deletion_service.broker.pulsar_client import PulsarBrokerClient
from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from deletion_service.cursor.exceptions import CursorVersionConflictError
from deletion_service.cursor.reset import InvalidResetPosition, reset_stored_cursor
from deletion_service.daemon.run import Daemon
from deletion_service.delete_phase.consumer.worker import Settled
from deletion_service.dlq import operations as dlq
from deletion_service.dlq.marker import MarkerKey
from deletion_service.errors import EXIT_OK
from deletion_service.inflight import MetricsBacklog
from deletion_service.mark_phase.trim import TrimResult, one_at_a_time, trim
from deletion_service.protocol.request import PendingDeleteLedgerInfo, decode, encode
from deletion_service.protocol.scope import discover, everything_served
from deletion_service.protocol.topics import DeletionTopics
from deletion_service.service import LedgerDeletionService
from deletion_service.testing.offload_objects import build_index_v2, encode_ledger_info
from metastore import MetadataStore, open_store
from metastore.formats import (
    LedgerInfo,
    OffloadContext,
    OffloadSegment,
    Position,
    decode_managed_ledger,
    managed_ledger_name,
    managed_ledger_path,
)
from offloaders.interface import java_uuid
from tests.support.deletion_world import UPSTREAM_META, make_world, now_ms
from tests.support.harness import MotoS3Server, PulsarLiteBroker, ZooKeeperServer, poll
from tests.support.interleaving_cluster import Bucket, Ids, read_all
from tests.support.safety_checker import SafetyChecker, Violation

SEED = int(os.environ.get("SCOPES_SEED") or random.SystemRandom().randrange(2**31))
#: The suite's run (30 rounds: every request kind, operator and segment shape a few times over);
#: ``scripts/soak_long.sh`` runs longer ones.
ROUNDS = int(os.environ.get("SCOPES_ROUNDS") or 30)
BUDGET_S = float(os.environ.get("SCOPES_BUDGET_S") or 15)
#: rounds run whatever the budget says, and more (up to ``ROUNDS``) until the run has done what the test
#: asserts it exercised (:func:`exercised`), so a loaded machine that fits fewer rounds in the budget still
#: does it
MIN_ROUNDS = 5
GRACE_S = 3
#: How far the second replica's claims clock runs ahead of the first's.
SKEW_S = 120.0
RECONSUME_S = 1
MAX_RETRIES = 30
ENTRIES = 10
SUBS = ["sub-a", "sub-b"]
TERMINAL = {"deleted", "absent", "still_in_use", "metadata_mismatch", "dlq"}
#: what a forger may write into its own namespace's DLQ: a retryable reason, so a filter requeues it
RETRYABLE = "max-retries-reached"


def canonical(data: bytes) -> bytes | None:
    """A request as a requeue republishes it (decoded, encoded again); None when it does not decode."""
    try:
        return encode(decode(data))
    except Exception:  # noqa: BLE001 - anything undecodable has no canonical form
        return None


def namespace_of(topic: str) -> str:
    """``tenant/ns`` of a topic name, spelled here (not the product's parser)."""
    return "/".join(topic.removeprefix("persistent://").split("/")[:2])


@dataclass
class Segment:
    """A streaming-offload segment: its objects, where they are, the ledgers its index holds."""

    keys: tuple[str, str]
    bucket: Bucket
    ledgers: list[int]
    topic: str
    msb: int
    lsb: int
    own_location: bool


@dataclass
class Truth:
    lock: threading.Lock = field(default_factory=threading.Lock)
    created: set[int] = field(default_factory=set)
    owner: dict[int, str] = field(default_factory=dict)  # ledger -> topic
    ever_listed: set[int] = field(default_factory=set)
    trimmed: set[int] = field(default_factory=set)
    orphans: set[int] = field(default_factory=set)  # unlisted, requested by their own namespace
    bait: set[int] = field(default_factory=set)  # unlisted, requested by nobody of their own namespace
    segments: list[Segment] = field(default_factory=list)
    in_segment: dict[int, list[Segment]] = field(default_factory=dict)
    #: canonical request -> namespaces whose topics the test first sent it to
    origin: dict[bytes, set[str]] = field(default_factory=dict)
    sent: list[tuple[bytes, str, int]] = field(default_factory=list)  # (payload, kind, round), via the daemon
    direct: list[tuple[bytes, str]] = field(default_factory=list)  # written straight into a DLQ
    cross: set[bytes] = field(default_factory=set)  # canonical requests naming the other tenant's ledger
    ops: Counter = field(default_factory=Counter)
    deleted_by: Counter = field(default_factory=Counter)  # (type, ledger, offload context) -> "deleted" ends


@dataclass
class World:
    store: MetadataStore  # the "broker", trim, resets, operators
    writer: ClusterWriter
    daemon: Daemon
    replica: Daemon  # the same namespaces and subscription; its claims clock SKEW_S ahead
    cluster_topics: DeletionTopics
    ns_topics: dict[str, DeletionTopics]
    tenants_topics: dict[str, list[str]]  # namespace -> its topics
    publisher: RequestPublisher  # the mark phase's (namespace scope: routes by topicName)
    ops_broker: PulsarBrokerClient  # operators and forgers
    ops_publisher: RequestPublisher  # as the CLI builds it for a requeue
    key: MarkerKey
    checker: SafetyChecker
    buckets: tuple[Bucket, Bucket]
    config: Any
    truth: Truth = field(default_factory=Truth)
    ids: Ids = field(default_factory=Ids)
    settled: list[Settled] = field(default_factory=list)
    settled_by: Counter = field(default_factory=Counter)  # (replica, outcome) -> how many
    violations: list[tuple[str, Violation]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    round: int = -1
    spent: Counter = field(default_factory=Counter)  # seconds per actor kind and phase, printed
    _producers: dict[str, Producer] = field(default_factory=dict)
    _seen: set[tuple[str, int | None, str]] = field(default_factory=set)

    def violate(self, where: str, found: list[Violation]) -> None:
        for v in found:
            if (v.invariant, v.ledger_id, v.detail) not in self._seen:
                self._seen.add((v.invariant, v.ledger_id, v.detail))
                self.violations.append((where, v))

    def topics(self) -> list[str]:
        return [t for ts in self.tenants_topics.values() for t in ts]

    def new_ledger(self, topic: str) -> int:
        lid = self.ids.take()
        self.writer.bk_ledger(lid, pulsar_custom_metadata(topic), entries=ENTRIES)
        with self.truth.lock:
            self.truth.created.add(lid)
            self.truth.owner[lid] = topic
        return lid

    def ledgers(self, topic: str) -> list[LedgerInfo]:
        node = self.store.get(managed_ledger_path(topic))
        assert node is not None, topic
        return decode_managed_ledger(node.data).ledgers

    def write_ledgers(self, topic: str, ledgers: list[LedgerInfo]) -> None:
        self.writer.managed_ledger(topic, ledgers)
        with self.truth.lock:
            self.truth.ever_listed.update(lg.ledger_id for lg in ledgers)

    def note_sent(self, payload: bytes, kind: str, namespace: str, direct: bool = False) -> None:
        with self.truth.lock:
            c = canonical(payload)
            if c is not None:
                self.truth.origin.setdefault(c, set()).add(namespace)
                if kind.startswith("cross") or kind == "dlq-direct":
                    self.truth.cross.add(c)
            if direct:
                self.truth.direct.append((payload, kind))
            else:
                self.truth.sent.append((payload, kind, self.round))

    def produce(self, topic: str, payload: bytes, props: dict[str, str]) -> None:
        with self.truth.lock:
            producer = self._producers.get(topic)
            if producer is None:
                producer = self._producers[topic] = self.ops_broker.producer(topic)
        producer.send(payload, props)


# ---------------------------------------------------------------- the DLQ as the CLI calls it
# (the only calls whose signatures changed since ef63906; adapt here to run this test there)


def dlq_list(w: World, scope: Sequence[DeletionTopics]) -> list[dlq.DlqEntry]:
    return dlq.list_dlq(w.ops_broker, scope, w.key)


def dlq_requeue(w: World, scope: Sequence[DeletionTopics], selection: dlq.Selection) -> int:
    return len(dlq.requeue(w.ops_broker, scope, w.key, w.ops_publisher, selection).moved)


def dlq_purge(w: World, scope: Sequence[DeletionTopics], selection: dlq.Selection) -> int:
    return len(dlq.purge(w.ops_broker, scope, w.key, selection))


def parked_on(w: World, topics: DeletionTopics) -> list[bytes]:
    return [m.data for m in dlq.snapshot(w.ops_broker, topics, w.key).parked]


def served(w: World) -> list[DeletionTopics]:
    return everything_served(w.config, w.store, w.cluster_topics)


# ---------------------------------------------------------------- the cluster


@pytest.fixture
def world(zk_url: str, zookeeper: ZooKeeperServer, pulsar_broker: PulsarLiteBroker,
          s3_server: MotoS3Server) -> Iterator[World]:
    buckets = tuple(Bucket(s3_server.endpoint, f"scopes-{n}-{uuid.uuid4().hex[:8]}") for n in ("ctx", "own"))
    for b in buckets:
        b.client.create_bucket(Bucket=b.name)
    bk_url = f"{zookeeper.url}/bk-{uuid.uuid4().hex[:8]}"
    stores = [open_store(u) for u in (zk_url, bk_url, zk_url, bk_url, zk_url, bk_url, zk_url, bk_url)]
    daemon_store, daemon_bk, admin, admin_bk, check_store, check_bk, replica_store, replica_bk = stores
    tag = uuid.uuid4().hex[:6]
    namespaces = [f"t1-{tag}/ns", f"t2-{tag}/ns"]
    base = make_world(daemon_store, daemon_bk, pulsar_broker.service_url,
                      ledgerDeletionTopicScope="namespace",
                      twoPhaseDeletionReconsumeLaterInSeconds=RECONSUME_S,
                      twoPhaseDeletionInUseGraceSeconds=GRACE_S,
                      twoPhaseDeletionMaxRetryDeleteCount=MAX_RETRIES,
                      minLedgerAgeSeconds=0,
                      offloadAllowedBuckets=[b.name for b in buckets])
    cfg = base.service.config
    writer = ClusterWriter(admin, admin_bk)
    writer.ensure_layout()
    tenants_topics = {ns: [f"persistent://{ns}/orders", f"persistent://{ns}/clicks"] for ns in namespaces}
    for topics in tenants_topics.values():
        for t in topics:
            writer.managed_ledger(t, [])  # the namespaces exist before the daemon looks for them
    mark_broker, ops_broker = PulsarBrokerClient(pulsar_broker.service_url), PulsarBrokerClient(
        pulsar_broker.service_url)
    cluster_topics = base.service.topics
    daemon = Daemon(base.service, MetricsBacklog(pulsar_broker.metrics_url), metrics_refresh_s=5,
                    namespaces=lambda: [ns for ns in discover(daemon_store) if ns in namespaces])
    replica_service = LedgerDeletionService(cfg, replica_store, PulsarBrokerClient(pulsar_broker.service_url),
                                            bookkeeper_store=replica_bk)
    replica_service.executor.claims.clock = lambda: time.time() + SKEW_S
    replica = Daemon(replica_service, MetricsBacklog(pulsar_broker.metrics_url), metrics_refresh_s=5,
                     namespaces=lambda: [ns for ns in discover(replica_store) if ns in namespaces])
    w = World(admin, writer, daemon, replica, cluster_topics,
              {ns: DeletionTopics.for_namespace(ns, cfg) for ns in namespaces}, tenants_topics,
              RequestPublisher(mark_broker, cluster_topics, namespace_scope=True), ops_broker,
              RequestPublisher(ops_broker, cluster_topics), MarkerKey.ensure(admin),
              SafetyChecker(check_store, check_bk), buckets, cfg)  # type: ignore[arg-type]
    try:
        yield w
    finally:
        daemon.stop()
        replica.stop()
        replica_service.broker.close()
        w.checker.close()
        w.publisher.close()
        w.ops_publisher.close()
        mark_broker.close()
        ops_broker.close()
        base.service.broker.close()
        for s in stores:
            s.close()


# ---------------------------------------------------------------- the broker step (quiet)


def upload_segment(w: World, topic: str, ledgers: list[int], rng: random.Random) -> Segment:
    own = rng.random() < 0.4
    bucket = w.buckets[1] if own else w.buckets[0]
    msb, lsb = rng.randrange(-(2**63), 2**63), rng.randrange(-(2**63), 2**63)
    name = java_uuid(msb, lsb)
    meta = {**UPSTREAM_META, "managedledgername": managed_ledger_name(topic)}
    index = build_index_v2({lid: encode_ledger_info(lid, ENTRIES, 1024) for lid in ledgers})
    bucket.client.put_object(Bucket=bucket.name, Key=name, Body=b"segment", Metadata=meta)
    bucket.client.put_object(Bucket=bucket.name, Key=f"{name}-index", Body=index, Metadata=meta)
    return Segment((name, f"{name}-index"), bucket, ledgers, topic, msb, lsb, own)


def location(bucket: Bucket) -> dict[str, str]:
    return {"bucket": bucket.name, "region": "us-east-1", "serviceEndpoint": bucket.endpoint}


def with_segment(info: LedgerInfo, seg: Segment, ctx_bucket: Bucket) -> LedgerInfo:
    """``info`` with ``seg`` appended to its offload context (a segment in the second bucket records it)."""
    ctx = info.offload_context or OffloadContext(complete=True, bookkeeper_deleted=False, timestamp=now_ms(),
                                                 driver_name="aws-s3", driver_metadata=location(ctx_bucket))
    part = OffloadSegment(uid_msb=seg.msb, uid_lsb=seg.lsb, complete=True,
                          **({"driver_name": "aws-s3", "driver_metadata": location(seg.bucket)}
                             if seg.own_location else {}))
    ctx = OffloadContext(uid_msb=ctx.uid_msb, uid_lsb=ctx.uid_lsb, complete=True, bookkeeper_deleted=False,
                         timestamp=ctx.timestamp, driver_name=ctx.driver_name, driver_metadata=ctx.driver_metadata,
                         segments=[*ctx.segments, part])
    return LedgerInfo(info.ledger_id, info.entries, info.size, info.timestamp, offload_context=ctx)


def grow(w: World, rng: random.Random) -> list[tuple[str, PendingDeleteLedgerInfo]]:
    """New ledgers, a segment over the oldest not-yet-offloaded ones, orphans and bait.  Returns the
    genuine orphan requests (each to its own namespace)."""
    out = []
    for topic in rng.sample(w.topics(), rng.randint(1, 3)):
        ledgers = w.ledgers(topic)
        ledgers += [LedgerInfo(w.new_ledger(topic), ENTRIES, 1024, now_ms()) for _ in range(rng.randint(1, 2))]
        fresh = [i for i, lg in enumerate(ledgers[:-1]) if lg.offload_context is None]
        if fresh and rng.random() < 0.6:
            first = fresh[0]
            if first > 0 and ledgers[first - 1].offload_context is not None and rng.random() < 0.5:
                first -= 1  # shares its first ledger with the previous segment
            picks = [i for i in range(first, min(first + rng.randint(2, 3), len(ledgers) - 1))]
            if len(picks) >= 2:
                seg = upload_segment(w, topic, [ledgers[i].ledger_id for i in picks], rng)
                for i in picks:
                    ledgers[i] = with_segment(ledgers[i], seg, w.buckets[0])
                with w.truth.lock:
                    w.truth.segments.append(seg)
                    for lid in seg.ledgers:
                        w.truth.in_segment.setdefault(lid, []).append(seg)
        w.write_ledgers(topic, ledgers)
        for sub in SUBS:  # a cursor now and then catches up (so trims have work)
            if rng.random() < 0.3:
                w.writer.cursor(topic, sub, position(rng, ledgers))
        if rng.random() < 0.2:
            orphan = w.new_ledger(topic)
            with w.truth.lock:
                w.truth.orphans.add(orphan)
            out.append(("orphan", PendingDeleteLedgerInfo.model_validate(
                {"topicName": topic, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER",
                 "ledgerId": orphan, "markedAt": now_ms(), "reason": "orphan"})))
        if rng.random() < 0.25:
            bait = w.new_ledger(topic)
            with w.truth.lock:
                w.truth.bait.add(bait)
    return out


def position(rng: random.Random, ledgers: list[LedgerInfo]) -> Position:
    recent = ledgers[-max(1, len(ledgers) // 3):]
    return Position(rng.choice(recent if rng.random() < 0.7 else ledgers).ledger_id, rng.randrange(0, ENTRIES))


# ---------------------------------------------------------------- the concurrent actors


def trim_actor(w: World, topic: str, rng: random.Random) -> Callable[[], None]:
    def send(request: PendingDeleteLedgerInfo) -> str:
        time.sleep(rng.uniform(0, 0.003))
        message_id = w.publisher.send_request(request)
        w.note_sent(request.to_json(), "trim", namespace_of(topic))
        if request.ledger_type.value == "OFFLOAD_LEDGER" and rng.random() < 0.5:
            # sent again at once, as by a trim whose receipt was lost: the two replicas may take one
            # copy side by side, and their claims (one clock SKEW_S ahead) must let one delete it
            w.publisher.send_request(request)
            w.note_sent(request.to_json(), "trim", namespace_of(topic))
        return message_id

    def run() -> None:
        result: TrimResult | None = None
        try:
            result = trim(w.store, topic, one_at_a_time(send), offline=True, write_within_s=GRACE_S)
        finally:
            if result is not None:
                with w.truth.lock:
                    w.truth.trimmed |= set(result.removed)

    return run


def reset_actor(w: World, topic: str, rng: random.Random) -> Callable[[], None]:
    target = position(rng, w.ledgers(topic))

    def run() -> None:
        time.sleep(rng.uniform(0, 0.01))
        try:
            reset_stored_cursor(w.store, topic, rng.choice(SUBS), target)
            w.truth.ops["reset"] += 1
        except (InvalidResetPosition, CursorVersionConflictError):
            w.truth.ops["reset-refused"] += 1

    return run


def forge_actor(w: World, rng: random.Random) -> Callable[[], None]:
    """Requests written to namespace B's topics that name namespace A's ledgers."""
    sender, victim = rng.sample(list(w.ns_topics), 2)
    mine = w.ns_topics[sender]
    nonce = f"{SEED}/{w.round}/{rng.random()}"
    with w.truth.lock:
        theirs = {lid for lid, t in w.truth.owner.items() if namespace_of(t) == victim}
        bait = sorted(theirs & w.truth.bait)
        trimmed = sorted(theirs & w.truth.trimmed)
        segs = [s for s in w.truth.segments if namespace_of(s.topic) == victim]
    listed = [lg.ledger_id for t in w.tenants_topics[victim] for lg in w.ledgers(t)]

    def body(lid: int, topic: str, **extra: Any) -> bytes:
        return json.dumps({"topicName": topic, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER",
                           "ledgerId": lid, "markedAt": now_ms() - 3_600_000 - rng.randrange(10**6),  # never a trim's
                           "reason": rng.choice(["manual", "orphan", "trim"]),
                           "nonce": nonce + str(rng.random()), **extra}).encode()

    def pick() -> tuple[int, str, dict[str, Any]] | None:
        what = rng.choice(["bait", "bait", "listed", "trimmed", "segment"])
        pool = {"bait": bait, "listed": listed, "trimmed": trimmed}.get(what)
        if what == "segment":
            if not segs:
                return None
            seg = rng.choice(segs)
            part: dict[str, Any] = {"uidMsb": seg.msb, "uidLsb": seg.lsb}
            if seg.own_location:
                part |= {"driverName": "aws-s3", "driverMetadata": location(seg.bucket)}
            return rng.choice(seg.ledgers), seg.topic, {"ledgerType": "OFFLOAD_LEDGER", "offloadContext": {
                "uidMsb": 0, "uidLsb": 0, "driverName": "aws-s3", "driverMetadata": location(w.buckets[0]),
                "segments": [part]}}
        if not pool:
            return None
        lid = rng.choice(pool)
        with w.truth.lock:
            return lid, w.truth.owner[lid], {}

    def run() -> None:
        for _ in range(rng.randint(2, 4)):
            time.sleep(rng.uniform(0, 0.005))
            how = rng.choice(["topic", "topic", "retry", "dlq-direct", "garbage"])
            if how == "garbage":
                payload = b"{not json " + nonce.encode() + str(rng.random()).encode()
                w.produce(mine.base, payload, {})
                w.note_sent(payload, "garbage", sender)
                continue
            named = pick()
            if named is None:
                continue
            lid, topic, extra = named
            payload = body(lid, topic, **extra)
            if how == "topic":
                w.produce(mine.base, payload, {})
                w.note_sent(payload, "cross", sender)
            elif how == "retry":  # its retry budget spent: dead-lettered at once, never retried elsewhere
                w.produce(mine.retry, payload, {"RECONSUMETIMES": str(MAX_RETRIES), "REAL_TOPIC": topic})
                w.note_sent(payload, "cross-retry", sender)
            else:  # a tenant may write into its own DLQ: a retryable reason, so a filter requeues it
                w.produce(mine.dlq, payload, {"reason": RETRYABLE, "RECONSUMETIMES": "3"})
                w.note_sent(payload, "dlq-direct", sender, direct=True)

    return run


def operator_actor(w: World, rng: random.Random) -> Callable[[], None]:
    """One operator command: requeue (--reason, --all, by id) or purge (by id, --reason), on one
    namespace's DLQ or on everything served."""
    unscoped = rng.random() < 0.4
    ns = rng.choice(list(w.ns_topics))
    what = rng.choice(["requeue-reason", "requeue-reason", "requeue-all", "requeue-id", "requeue-id",
                       "purge-id", "purge-reason"])

    def run() -> None:
        scope = served(w) if unscoped else [w.ns_topics[ns]]
        label = f"{what}{'@all' if unscoped else ''}"
        try:
            if what == "requeue-reason":
                reason = rng.choice(["cross-namespace", "cross-namespace", RETRYABLE, "invalid-request"])
                n = dlq_requeue(w, scope, dlq.Selection(reason=reason))
            elif what == "requeue-all":
                n = dlq_requeue(w, scope, dlq.Selection(everything=True))
            else:
                listed = dlq_list(w, scope)
                if what == "purge-reason":
                    n = dlq_purge(w, scope, dlq.Selection(reason="invalid-request"))
                elif not listed:
                    n = 0
                else:
                    chosen = rng.sample(listed, min(len(listed), rng.randint(1, 3)))
                    if what == "purge-id":  # purge only garbage: a purged request never reaches a daemon again
                        chosen = [e for e in chosen if e.request is None]
                    ids = dlq.Selection(frozenset(e.message_id for e in chosen))
                    n = 0 if not chosen else (dlq_requeue(w, scope, ids) if what == "requeue-id"
                                              else dlq_purge(w, scope, ids))
        except dlq.UnknownMessageIds:
            w.truth.ops[f"{label}:raced"] += 1  # another operator settled one of them first: nothing done
            return
        w.truth.ops[label] += 1
        w.truth.ops["requeued" if what.startswith("requeue") else "purged"] += n

    return run


def operator_loop(w: World, stop: threading.Event, rng: random.Random) -> None:
    """An operator at the CLI all through the rounds (not tied to them: a command takes seconds)."""
    while not stop.wait(rng.uniform(0, 0.3)):
        guarded(w, "operator", operator_actor(w, rng))()


def genuine_actor(w: World, requests: list[tuple[str, PendingDeleteLedgerInfo]]) -> Callable[[], None]:
    def run() -> None:
        for kind, r in requests:
            w.publisher.send_request(r)
            w.note_sent(r.to_json(), kind, namespace_of(r.topic_name))

    return run


def guarded(w: World, name: str, fn: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        t0 = time.monotonic()
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - an actor's crash is a finding, reported with the seed
            w.errors.append(f"round {w.round}: {name} raised {type(e).__name__}: {e}")
        finally:
            w.spent[name.split()[0]] += time.monotonic() - t0

    return run


# ---------------------------------------------------------------- observation


def observe(w: World, where: str) -> None:
    """Referenced ledgers present; no segment gone while a ledger it holds is listed (objects read first)."""
    with w.truth.lock:
        known, segs = set(w.truth.created), list(w.truth.segments)
    objects = {b.name: b.keys() for b in w.buckets}
    snap = w.checker.snapshot()
    w.violate(where, w.checker.referenced_present(snap, known))
    listed = snap.listed_ids()
    for seg in segs:
        gone = [k for k in seg.keys if k not in objects[seg.bucket.name]]
        holding = sorted(set(seg.ledgers) & listed)
        if gone and holding:
            w.violate(where, [Violation("segment-deleted-while-held", holding[0],
                                        f"segment {seg.keys[0]} ({seg.bucket.name}) of {seg.ledgers} gone while "
                                        f"{holding} listed")])


def observer(w: World, stop: threading.Event, stats: Counter) -> None:
    while not stop.wait(0.3):
        try:
            observe(w, f"observer during round {w.round}")
            stats["observations"] += 1
        except Exception as e:  # noqa: BLE001
            w.errors.append(f"observer: {type(e).__name__}: {e}")


def deleted_once(w: World, s: Settled) -> None:
    """No ledger, and no offloaded copy, is recorded deleted twice, whichever replica settles it: duplicate
    requests end ``deleted`` once and ``absent`` after, and a claim taken by the replica whose clock runs
    ahead is never taken over while its owner deletes."""
    r = s.request
    if r is None or s.outcome.value != "deleted":
        return
    target = (r.ledger_type.value, r.ledger_id, repr(r.offload_context) if r.offload_context is not None else None)
    with w.truth.lock:
        w.truth.deleted_by[target] += 1
        twice = w.truth.deleted_by[target] > 1
    if twice:
        w.violate(f"round {w.round}", [Violation("deleted-twice", r.ledger_id, f"{target} recorded deleted again "
                                                 f"({s.action.reason}) read from {s.message.topic}")])


def settle_tenancy(w: World, s: Settled) -> None:
    """A deletion happened only for the namespace the request was read from and first sent to; a request
    naming another tenant's ledger ends only in the DLQ."""
    r = s.request
    if r is None or s.outcome.value not in TERMINAL:
        return
    with w.truth.lock:
        owner = w.truth.owner.get(r.ledger_id)
        c = canonical(s.message.data)
        origin = w.truth.origin.get(c, set()) if c is not None else set()
        cross = c in w.truth.cross
    read_from = namespace_of(s.message.topic)
    if s.outcome.value == "deleted" and owner is not None:
        ns = namespace_of(owner)
        if ns != read_from or (origin and ns not in origin):
            w.violate(f"round {w.round}", [Violation(
                "tenancy:deleted-for-another-namespace", r.ledger_id,
                f"ledger of {owner} deleted by a request read from {s.message.topic}, first sent to {sorted(origin)}")])
    if cross and s.outcome.value != "dlq":
        w.violate(f"round {w.round}", [Violation(
            "tenancy:cross-request-not-parked", r.ledger_id,
            f"a request first sent to {sorted(origin)} naming {r.topic_name} ended {s.outcome.value!r} "
            f"read from {s.message.topic} ({s.action.reason})")])


# ---------------------------------------------------------------- the test


def exercised(w: World) -> bool:
    """Whether the rounds so far have given the end state what the test asserts it saw: a trim, and a
    segment all of whose ledgers were trimmed (so the drain can reclaim it)."""
    with w.truth.lock:
        trimmed = set(w.truth.trimmed)
        return bool(trimmed) and any(set(seg.ledgers) <= trimmed for seg in w.truth.segments)


@pytest.mark.slow
def test_cross_namespace_requeues_and_shared_segments_interleaved(
        world: World, pulsar_broker: PulsarLiteBroker, capsys: pytest.CaptureFixture[str]) -> None:
    w = world
    with capsys.disabled():
        print(f"\nscopes interleaving: SCOPES_SEED={SEED} SCOPES_ROUNDS={ROUNDS} SCOPES_BUDGET_S={BUDGET_S}",
              flush=True)
    started = time.monotonic()
    setup = random.Random(f"{SEED}/setup")
    for topic in w.topics():
        ledgers = [LedgerInfo(w.new_ledger(topic), ENTRIES, 1024, now_ms()) for _ in range(3)]
        w.write_ledgers(topic, ledgers)
        for sub in SUBS:
            w.writer.cursor(topic, sub, Position(setup.choice(ledgers).ledger_id, 0))
    for topics in w.ns_topics.values():
        w.ops_broker.ensure_subscription(topics.dlq, topics.dlq_subscription)
    w.daemon.start()
    w.replica.start()
    for d in (w.daemon, w.replica):
        assert d.worker is not None
        assert sorted(t.namespace for t in d.service.served if not t.partitioned) == sorted(w.ns_topics)

    def on_settled_by(name: str) -> Callable[[Settled], None]:
        def on_settled(s: Settled) -> None:
            w.settled.append(s)
            w.settled_by[name, s.outcome.value] += 1
            settle_tenancy(w, s)
            deleted_once(w, s)

        return on_settled

    for name, d in (("first", w.daemon), ("skewed", w.replica)):
        assert d.worker is not None
        d.worker.hooks.on_settled = on_settled_by(name)
    stop, ops_stop, stats = threading.Event(), threading.Event(), Counter()
    watcher = threading.Thread(target=observer, args=(w, stop, stats), daemon=True)
    watcher.start()
    operators = [threading.Thread(target=operator_loop, args=(w, ops_stop, random.Random(f"{SEED}/op/{i}")),
                                  name=f"operator-{i}", daemon=True) for i in range(3)]
    for t in operators:
        t.start()
    try:
        rounds_began = time.monotonic()  # the budget is the rounds': set-up on a loaded machine must not eat it
        for rnd in range(ROUNDS):
            if rnd >= MIN_ROUNDS and exercised(w) and time.monotonic() - rounds_began > BUDGET_S:
                break
            w.round = rnd
            rng = random.Random(f"{SEED}/{rnd}")
            t0 = time.monotonic()
            genuine = grow(w, rng)
            w.spent["grow"] += time.monotonic() - t0
            actors = [guarded(w, "genuine", genuine_actor(w, genuine))] if genuine else []
            for topic in rng.sample(w.topics(), rng.randint(1, 2)):
                actors.append(guarded(w, f"trim {topic}", trim_actor(w, topic, random.Random(f"{SEED}/{rnd}/{topic}"))))
            for i in range(rng.randint(1, 2)):
                actors.append(guarded(w, "reset", reset_actor(w, rng.choice(w.topics()),
                                                              random.Random(f"{SEED}/{rnd}/reset/{i}"))))
            actors.append(guarded(w, "forger", forge_actor(w, random.Random(f"{SEED}/{rnd}/forge"))))
            rng.shuffle(actors)
            threads = [threading.Thread(target=a, name=f"r{rnd}-{i}") for i, a in enumerate(actors)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
                if t.is_alive():
                    w.errors.append(f"round {rnd}: actor {t.name} still running after 60 s")
            t0 = time.monotonic()
            observe(w, f"after round {rnd}")
            snap = w.checker.snapshot()
            with w.truth.lock:
                allowed = w.truth.trimmed | w.truth.orphans
                created = set(w.truth.created)
            w.violate(f"after round {rnd}", w.checker.deleted_only_what_left(snap, created, allowed, ()))
            w.spent["checks"] += time.monotonic() - t0
        ops_stop.set()
        for t in operators:
            t.join(120)
        # a last requeue of everything parked, by filter, then by id: whatever comes back is decided again
        for scope in ([*w.ns_topics.values()], served(w)):
            w.truth.ops["requeued"] += dlq_requeue(w, scope, dlq.Selection(everything=True))
        ids = frozenset(e.message_id for e in dlq_list(w, served(w)) if e.request is not None)
        if ids:
            w.truth.ops["requeued"] += dlq_requeue(w, served(w), dlq.Selection(ids))
    finally:
        stop.set()
        ops_stop.set()
        watcher.join(10)
        for t in operators:
            t.join(120)
    rounds_s = time.monotonic() - started

    # ---- drain: every request sent through the daemon ended; the daemon idle; nothing unacked
    missing: list[tuple[bytes, str]] = []

    def every_request_ended() -> bool:
        ends = Counter(s.message.data for s in list(w.settled) if s.outcome.value in TERMINAL)
        missing[:] = [(p, k) for p, k, _ in w.truth.sent if ends[p] < 1]
        return not missing

    poll(every_request_ended, 90, interval=0.3)
    for p, k in missing:
        w.violations.append(("drain", Violation("3:never-settled", None, f"{k} {p[:140]!r}")))
    for d in (w.daemon, w.replica):
        if d.wait(exit_when_idle=True, max_wait_s=60, poll_s=0.5) != EXIT_OK:
            w.violations.append(("drain", Violation("3:daemon-not-idle", None, d.idle_state().why_not)))
    w.daemon.stop()
    w.replica.stop()
    everything = served(w)
    for topics in everything:
        for m in read_all(pulsar_broker.service_url, topics.consumed, topics.subscription, 1000):
            w.violations.append(("drain", Violation("3:left-unacked", None, f"{m.topic_name()}: {m.data()[:140]!r}")))
    hidden = parked_total = 0
    for topics in everything:
        unacked = Counter(m.data() for m in read_all(pulsar_broker.service_url, [topics.dlq],
                                                     topics.dlq_subscription, 1000))
        listed = Counter(parked_on(w, topics))
        parked_total += sum(unacked.values())
        for payload, n in (unacked - listed).items():
            hidden += n
            w.violations.append(("drain", Violation("3:dlq-hidden", None, f"{topics.dlq}: {payload[:120]!r}")))

    # ---- judge the end state
    observe(w, "end")
    final = w.checker.snapshot()
    t = w.truth
    w.violate("end", w.checker.deleted_only_what_left(final, t.created, t.trimmed | t.orphans, ()))
    w.violate("end", w.checker.trim_reports_match(final, t.ever_listed, t.trimmed))
    w.violate("end", w.checker.no_leak(final, t.trimmed, also_deleted=t.orphans))
    for lid in sorted(t.bait - final.bookkeeper):
        w.violations.append(("end", Violation("tenancy:bait-deleted", lid, f"unlisted ledger of {t.owner[lid]} "
                                                                           "nobody of its namespace asked for")))
    objects = {b.name: b.keys() for b in w.buckets}
    listed = final.listed_ids()
    segs_gone = 0
    for seg in t.segments:
        present = [k for k in seg.keys if k in objects[seg.bucket.name]]
        if set(seg.ledgers) <= t.trimmed and present:
            w.violations.append(("end", Violation("segment-leak", seg.ledgers[0], f"segment {seg.keys[0]} of "
                                                   f"{seg.ledgers} ({seg.bucket.name}) left after all were trimmed")))
        if set(seg.ledgers) & listed and len(present) < 2:
            w.violations.append(("end", Violation("segment-deleted-while-held", seg.ledgers[0],
                                                   f"segment {seg.keys[0]} of {seg.ledgers} gone, held by listed "
                                                   f"{sorted(set(seg.ledgers) & listed)}")))
        segs_gone += not present

    outcomes = Counter(s.outcome.value for s in w.settled)
    deleted = t.created - final.bookkeeper
    read_from = Counter(namespace_of(s.message.topic) == namespace_of(s.request.topic_name)
                        for s in w.settled if s.request is not None and s.outcome.value == "dlq")
    # a segment request held (reconsumed in the grace, then acked in use) because a listed ledger holds it
    held = sum(1 for s in w.settled if s.request is not None and s.request.ledger_type.value == "OFFLOAD_LEDGER"
               and ("holding it" in s.action.reason or "is named by the offload context of ledger" in s.action.reason))
    kinds = Counter(k for _, k, _ in t.sent) + Counter(k for _, k in t.direct)
    figures = (
        f"seed={SEED} rounds={w.round + 1}/{ROUNDS} in {rounds_s:.0f}s (+{time.monotonic() - started - rounds_s:.0f}s "
        f"drain); sent={dict(sorted(kinds.items()))}; outcomes={dict(sorted(outcomes.items()))}; "
        f"deleted by replica first={w.settled_by['first', 'deleted']} skewed={w.settled_by['skewed', 'deleted']}; "
        f"ledgers created={len(t.created)} trimmed={len(t.trimmed)} deleted={len(deleted)} orphans={len(t.orphans)} "
        f"bait={len(t.bait)}; segments={len(t.segments)} (own location {sum(s.own_location for s in t.segments)}, "
        f"shared boundary {sum(1 for segs in t.in_segment.values() if len(segs) > 1)}) gone={segs_gone} "
        f"held-requests={held}; "
        f"dlq parked at end={parked_total} hidden={hidden} same-ns-dlq={read_from[True]} "
        f"cross-dlq={read_from[False]}; ops={dict(sorted(t.ops.items()))}; observations={stats['observations']}; "
        f"seconds spent {', '.join(f'{k}={v:.0f}' for k, v in sorted(w.spent.items()))}"
    )
    with capsys.disabled():
        print(f"scopes interleaving: {figures}")
    if w.violations or w.errors:
        lines = [f"SCOPES_SEED={SEED}: {len(w.violations)} violation(s), {len(w.errors)} harness error(s); {figures}"]
        groups: dict[str, list[str]] = {}
        for where, v in w.violations:
            groups.setdefault(v.invariant, []).append(f"{where}: {v}")
        for invariant, items in sorted(groups.items()):
            lines += [f"  {invariant}: {len(items)}", *(f"    {x}" for x in items[:4])]
        lines += [f"  harness: {e}" for e in w.errors[:10]]
        pytest.fail("\n".join(lines), pytrace=False)
    # the run exercised what it claims to
    assert t.trimmed and deleted >= t.trimmed, f"seed {SEED}: nothing trimmed and deleted"
    assert segs_gone, f"seed {SEED}: no segment was ever reclaimed"
    assert w.settled_by["first", "deleted"] and w.settled_by["skewed", "deleted"], f"seed {SEED}: a replica idle"
    assert t.ops["requeued"] and read_from[False], f"seed {SEED}: no cross-namespace request parked and requeued"
