"""Randomized interleavings of trim, the delete-phase daemon, cursor resets and forged requests.

Everything is real: ZooKeeper (metadata in one
chroot, BookKeeper's ledger tree in another, as on a cluster), the pulsar-lite
broker carrying the requests, moto_server holding offloaded copies, the real
``trim`` with a real ``RequestPublisher``, the real ``Daemon`` over
``LedgerDeletionService`` in a thread, and ``reset_stored_cursor``.

Each round, a "broker" step first grows some topics (new ledgers, an offload,
an unlisted orphan) while nothing else edits metadata; then, concurrently:
trims (some lose a receipt, some "crash" between sending and writing, some
have a cursor reset land inside their sends), free-running cursor resets to
random listed positions, and forged requests; the daemon consumes throughout.
After the round, with no trim running, the checks that need a quiet mark
phase run; an observer thread checks invariant 1 all along.  At the end the
daemon drains to idle and everything is judged.

It covers the shapes that need the age guard (``minLedgerAgeSeconds`` =
:data:`MIN_AGE_S`) and the request kinds PIP-186 lacks.  The broker step also
creates ledgers whose reference lands only in a *later* round ("pending": a
rollover whose managed-ledger write, a schema version whose locator entry, a
compaction whose cursor property, a bucket snapshot whose cursor property has not
been written yet); forged requests of every reason name them meanwhile, and they
must survive until listed (each lands within :data:`PENDING_MAX_S`, far inside
the age guard).  It compacts now and then (the compacted ledger it replaces is
released and requested, as ``scan-orphans --enqueue`` would), merges bucket
snapshots (the merged-away ones are released and requested), deletes
subscriptions holding buckets and whole topics holding a compacted ledger and a
bucket (what upstream leaks, #21745 and #22802: released and requested).  Some
forged requests carry forged properties (``RECONSUMETIMES``, a huge
``DELAY_TIME``, ``ledgerDeletionGraceSince``, ``REAL_TOPIC``/``ORIGIN_MESSAGE_ID``
naming other topics), sent to the request topic or straight to RETRY: they may
cost a retry (or, with a forged retry count, a DLQ entry), never a deletion.

The judge is :mod:`tests.support.safety_checker`, which reads the stores itself and
shares no decision code with the product.  Invariants (DESIGN: "What
references a ledger", "Mark phase", the delete-phase table):

1. never delete a referenced ledger; stronger: BookKeeper (and the bucket)
   lost only ledgers that a successful trim removed from their list or that
   the test created unlisted on purpose;
2. no leak: after the drain, every ledger a trim removed is gone everywhere;
3. every request ended somewhere: all settled (acked, mismatch or DLQ, never
   just reconsumed), the daemon idle, nothing left unacked on the request
   partitions or RETRY, and each forged request in the outcome its kind allows.

Seed: ``SAFETY_SEED=N`` replays a run's choices (the interleaving itself is
the scheduler's); ``SAFETY_ROUNDS`` and ``SAFETY_BUDGET_S`` change the length (the suite runs 60
rounds; ``scripts/soak_long.sh`` the long run).  Both are printed.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from deletion_service.broker.interface import BrokerError, Producer
from deletion_service.broker.publisher import RequestPublisher
from deletion_service.broker.pulsar_client import PulsarBrokerClient
from deletion_service.cluster_writer import (
    ClusterWriter,
    bucket_custom_metadata,
    compacted_custom_metadata,
    pulsar_custom_metadata,
    schema_custom_metadata,
)
from deletion_service.cursor.exceptions import CursorVersionConflictError
from deletion_service.cursor.reset import InvalidResetPosition, reset_stored_cursor
from deletion_service.daemon.run import Daemon
from deletion_service.delete_phase.consumer.worker import Settled
from deletion_service.delete_phase.rules.hold_reason import HELD_FOR, HELD_SEAL, HELD_WHY
from deletion_service.dlq.marker import MarkerKey
from deletion_service.dlq.operations import snapshot as dlq_snapshot
from deletion_service.errors import EXIT_OK
from deletion_service.inflight import MetricsBacklog
from deletion_service.mark_phase.trim import TrimRefused, TrimResult, one_at_a_time, trim
from deletion_service.protocol.fate import HoldReason
from deletion_service.protocol.request import PendingDeleteLedgerInfo
from deletion_service.protocol.topics import DeletionTopics
from metastore import MetadataStore, open_store
from metastore.formats import (
    LedgerInfo,
    LedgerLayout,
    ManagedCursorInfo,
    OffloadContext,
    Position,
    cursor_path,
    decode_cursor,
    decode_managed_ledger,
    encode_cursor,
    ledger_path,
    managed_ledger_path,
    schema_id,
)
from metastore.interface import ANY
from offloaders.interface import java_uuid
from tests.support.deletion_world import S3Bucket, make_world, now_ms
from tests.support.deletion_world import request as genuine_request
from tests.support.harness import MotoS3Server, PulsarLiteBroker, ZooKeeperServer, wait_until
from tests.support.interleaving_cluster import Bucket, Ids, read_all
from tests.support.safety_checker import SafetyChecker, Snapshot, Violation

SEED = int(os.environ.get("SAFETY_SEED") or random.SystemRandom().randrange(2**31))
#: The suite's run: 60 rounds (about 120 trims, every mode, a few dozen aborted) keep every end-of-run
#: assertion below exercised; ``scripts/soak_long.sh`` runs the 200-round, 150-second length.
ROUNDS = int(os.environ.get("SAFETY_ROUNDS") or 60)
#: No new round starts after this many seconds of rounds (a loaded machine shortens the run, never times it out).
BUDGET_S = float(os.environ.get("SAFETY_BUDGET_S") or 45)
#: rounds run whatever the budget says, so a slow set-up still exercises what the test asserts it did
MIN_ROUNDS = 5
GRACE_S = 3  # twoPhaseDeletionInUseGraceSeconds
RECONSUME_S = 1  # twoPhaseDeletionReconsumeLaterInSeconds
ENTRIES = 10  # every ledger the test writes has entries 0..9
MIN_AGE_S = 20  # minLedgerAgeSeconds: what a pending or released ledger must wait out unless proven superseded
#: A pending reference lands this many rounds after its ledger was created, or once the ledger is this
#: old, whichever is first (checked when it lands: far inside the age guard, or the run says it was too slow).
PENDING_ROUNDS = (2, 6)
PENDING_MAX_S = MIN_AGE_S / 5
MAX_RETRIES = 30  # twoPhaseDeletionMaxRetryDeleteCount
BUCKET_PREFIX = "#pulsar.internal.delayed.bucket_"  # PIP-195 cursor property of a bucket snapshot ledger

POOL = [
    "persistent://t1/ns/orders",
    "persistent://t1/ns/my topic",  # URL-encoded path (space -> '+')
    "persistent://t1/ns/clicks",
    "persistent://t2/ns/parted-partition-0",  # two partitions share one schema
    "persistent://t2/ns/parted-partition-1",
    "persistent://t2/other/events",
]
COMPACTED = {POOL[0], POOL[2], POOL[5]}  # topics with a __compaction cursor holding a compacted ledger
STATIC = "persistent://t3/ns/ledger-backed"  # a cursor keeps its state in a cursor ledger: never trimmed
# STATIC's __compaction cursor keeps its state in a cursor ledger too: every compacted ledger of STATIC counts
# as referenced, the one its node names and an older one it does not ("compacted-hidden" requests).
STATIC_CURSOR = "durable"
SUBS = ["sub-a", "sub-b"]

#: How a request may leave the delete phase for good (a reconsume is not an end; neither is a dry run's).
TERMINAL = {"deleted", "absent", "still_in_use", "metadata_mismatch", "dlq"}


class SimulatedCrash(Exception):
    """Raised from inside trim's send: the process "dies" after sending, before its write."""


# ---------------------------------------------------------------- ground truth


@dataclass
class Sent:
    """One request the test put on the request topic, and what it is allowed to end as."""

    payload: bytes
    kind: str
    round: int
    ledger_id: int | None
    topic: str | None = None
    props: dict[str, str] | None = None  # forged message properties
    to_retry: bool = False  # sent straight to RETRY
    may_dlq: bool = False  # a forged RECONSUMETIMES near the retry budget: a DLQ entry is allowed too

    @property
    def label(self) -> str:
        """The kind as the outcome table prints it."""
        return self.kind + ("+props" if self.props else "") + ("@retry" if self.to_retry else "")


@dataclass
class Pending:
    """A ledger the broker step created whose reference it writes only in a later round."""

    ledger_id: int
    what: str  # rollover | schema | compacted | bucket
    topic: str
    due_round: int
    created_at: float  # time.monotonic()
    cursor: str | None = None  # bucket: its subscription
    key: str | None = None  # bucket: its cursor property

    @property
    def owner(self) -> tuple[str, ...]:
        """Whose references record it: the same owner records its ledgers in id order."""
        if self.what == "schema":
            return (self.what, schema_id(self.topic))
        return (self.what, self.topic, self.cursor or "")


@dataclass
class Doomed:
    """A topic (or only a subscription) the broker step deletes in a later round, leaking what upstream leaks."""

    topic: str
    retire_round: int
    sub: str  # the subscription holding the buckets
    buckets: dict[str, int]  # cursor property -> bucket ledger
    data: list[int] = field(default_factory=list)  # whole topic: its data ledgers (the broker deletes them)
    compacted: int | None = None  # whole topic: its compacted ledger (leaked)


@dataclass
class TrimRun:
    """One trim as it happened: ``result`` is None when it "crashed" between its sends and its write."""

    round: int
    topic: str
    mode: str
    result: TrimResult | None
    sent_ids: list[int]
    reset_landed: bool = False  # reset-in-send: the reset inside its sends succeeded

    def kept(self) -> list[int]:
        """Ledgers this trim must have left listed: all it picked when aborted, all it sent when it
        crashed before writing, those whose send failed otherwise."""
        if self.result is None:
            return sorted(set(self.sent_ids))
        return self.result.picked if self.result.aborted else self.result.not_sent


@dataclass
class Truth:
    """What the test did, recorded as it happened — compared with what the checker reads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    created_bk: set[int] = field(default_factory=set)
    topic_of: dict[int, str] = field(default_factory=dict)
    ever_listed: set[int] = field(default_factory=set)
    orphans: set[int] = field(default_factory=set)  # created unlisted on purpose, requested as orphans
    protected: dict[int, str] = field(default_factory=dict)  # schema / compacted / cursor / bucket ledgers
    pending: dict[int, Pending] = field(default_factory=dict)
    pending_made: Counter = field(default_factory=Counter)
    #: made unreferenced on purpose by the broker step (superseded compacted ledger, merged-away bucket,
    #: a deleted subscription's buckets, a deleted topic's compacted ledger and buckets), each requested
    released: dict[int, str] = field(default_factory=dict)
    dropped: set[int] = field(default_factory=set)  # deleted by the "broker" itself (a deleted topic's data)
    compacted_now: dict[str, int] = field(default_factory=dict)  # topic -> what its __compaction cursor names
    buckets: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)  # (topic, cursor) -> live ones
    schema_ledgers: dict[str, list[int]] = field(default_factory=dict)  # schema id -> recorded ledgers
    hidden_compacted: int = -1  # STATIC's compacted ledger its __compaction node does not name
    doomed: list[Doomed] = field(default_factory=list)
    objects: dict[int, tuple[str, ...]] = field(default_factory=dict)  # offloaded ledger -> keys
    trimmed: set[int] = field(default_factory=set)  # TrimResult.removed, union
    sent: list[Sent] = field(default_factory=list)
    trim_runs: list[TrimRun] = field(default_factory=list)
    resets: Counter = field(default_factory=Counter)

    def known(self) -> tuple[set[int], set[str]]:
        with self.lock:
            return set(self.created_bk), {k for keys in self.objects.values() for k in keys}

    def record(self, sent: Sent) -> None:
        with self.lock:
            self.sent.append(sent)

    def count(self, what: str) -> None:
        with self.lock:
            self.resets[what] += 1

    def describe(self, ledger_id: int | None) -> str:
        if ledger_id is None:
            return ""
        what = (self.protected.get(ledger_id) or (f"released {self.released[ledger_id]}" if ledger_id in self.released
                                                  else None)
                or ("orphan" if ledger_id in self.orphans else "dropped" if ledger_id in self.dropped else "data"))
        pending = self.pending.get(ledger_id)
        return f" ({what} ledger of {self.topic_of.get(ledger_id, '?')}{'; pending' if pending else ''})"

    def may_be_gone(self) -> set[int]:
        """Ledgers that may leave BookKeeper other than by a trim: made unreferenced (and requested) on
        purpose, or deleted by the broker step itself."""
        with self.lock:
            return set(self.orphans) | set(self.released) | set(self.dropped)


# ---------------------------------------------------------------- the cluster under test


@dataclass
class Cluster:
    """The stores, the daemon and the mark-phase side, each on its own connections (as separate processes)."""

    admin: MetadataStore  # the "broker" and the mark-phase tools (trim, cursor reset)
    admin_bk: MetadataStore
    writer: ClusterWriter
    publisher: RequestPublisher  # the mark phase's producer (trim, enqueue, forgers)
    topics: DeletionTopics
    daemon: Daemon
    checker: SafetyChecker
    bucket: S3Bucket
    s3: Any
    truth: Truth = field(default_factory=Truth)
    ids: Ids = field(default_factory=Ids)
    settled: list[tuple[Settled, float]] = field(default_factory=list)
    violations: list[tuple[str, Violation]] = field(default_factory=list, repr=False)
    errors: list[str] = field(default_factory=list)
    round: int = -1
    spent: Counter = field(default_factory=Counter)  # seconds per phase, printed with the figures
    _seen: set[tuple[str, int | None, str]] = field(default_factory=set, repr=False)
    _forgers: dict[str, Producer] = field(default_factory=dict, repr=False)  # request partitions, with properties

    def violate(self, where: str, found: list[Violation]) -> None:
        """Keep each broken invariant once, where it was first seen (a deleted schema ledger would
        otherwise be reported again by every later observation)."""
        for v in found:
            key = (v.invariant, v.ledger_id, v.detail)
            if key not in self._seen:
                self._seen.add(key)
                self.violations.append((where, v))

    # ---- writes the "broker" does (only between rounds, when no trim runs)

    def new_ledger(self, topic: str, custom: dict[str, str] | None = None) -> int:
        lid = self.ids.take()
        self.writer.bk_ledger(lid, custom or pulsar_custom_metadata(topic), entries=ENTRIES)
        with self.truth.lock:
            self.truth.created_bk.add(lid)
            self.truth.topic_of[lid] = topic
        return lid

    def ledgers(self, topic: str) -> list[LedgerInfo]:
        node = self.admin.get(managed_ledger_path(topic))
        assert node is not None, topic
        return decode_managed_ledger(node.data).ledgers

    def write_ledgers(self, topic: str, ledgers: list[LedgerInfo]) -> None:
        self.writer.managed_ledger(topic, ledgers)
        with self.truth.lock:
            self.truth.ever_listed.update(lg.ledger_id for lg in ledgers)

    def offload(self, topic: str, info: LedgerInfo, rng: random.Random) -> LedgerInfo:
        msb, lsb = rng.randrange(-(2**63), 2**63), rng.randrange(-(2**63), 2**63)
        keys = tuple(self.bucket.offload_ledger(topic, info.ledger_id, msb, lsb))
        with self.truth.lock:
            self.truth.objects[info.ledger_id] = keys
        ctx = OffloadContext(uid_msb=msb, uid_lsb=lsb, complete=True, bookkeeper_deleted=False,
                             timestamp=now_ms(), driver_name="aws-s3",
                             driver_metadata={"bucket": self.bucket.name, "region": "us-east-1",
                                              "serviceEndpoint": self.bucket.endpoint})
        return LedgerInfo(info.ledger_id, info.entries, info.size, info.timestamp, offload_context=ctx)

    def edit_cursor(self, topic: str, cursor: str, change: Callable[[ManagedCursorInfo], ManagedCursorInfo]) -> None:
        """Read-modify-write one cursor node at the version read (as a broker does; nothing else writes now)."""
        path = cursor_path(topic, cursor)
        node = self.admin.get(path)
        assert node is not None, path
        self.admin.put(path, encode_cursor(change(decode_cursor(node.data))), node.version)

    def pend(self, pending: Pending, protect: str | None = None) -> None:
        with self.truth.lock:
            self.truth.pending[pending.ledger_id] = pending
            self.truth.pending_made[pending.what] += 1
            if protect is not None:
                self.truth.protected[pending.ledger_id] = protect

    def release(self, ledger_id: int, what: str, request: PendingDeleteLedgerInfo,
                out: list[tuple[str, PendingDeleteLedgerInfo]]) -> None:
        """``ledger_id`` was just made unreferenced on purpose: it may go, and must be gone after the drain."""
        with self.truth.lock:
            self.truth.released[ledger_id] = what
            self.truth.protected.pop(ledger_id, None)
        out.append((f"released-{what}", request))

    # ---- sends

    def send_request(self, request: PendingDeleteLedgerInfo, kind: str, rnd: int) -> str:
        message_id = self.publisher.send_request(request)
        self.truth.record(Sent(request.to_json(), kind, rnd, request.ledger_id, request.topic_name))
        return message_id

    def send_raw(self, body: dict[str, Any] | bytes, kind: str, rnd: int, ledger_id: int | None,
                 topic: str | None) -> None:
        payload = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
        partition = self.topics.partition_for(ledger_id if ledger_id is not None else rnd)
        self.publisher.send_raw(partition, payload)
        self.truth.record(Sent(payload, kind, rnd, ledger_id, topic))

    def send_forged_properties(self, body: dict[str, Any] | bytes, kind: str, rnd: int, ledger_id: int | None,
                               topic: str | None, props: dict[str, str], to_retry: bool) -> None:
        """A request with properties of the forger's choosing, to its partition or straight to RETRY."""
        payload = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
        retries = props.get("RECONSUMETIMES", "")
        may_dlq = retries.isdigit() and int(retries) >= MAX_RETRIES // 2
        if to_retry:
            self.publisher.send_retry(payload, props, 0)
        else:
            partition = self.topics.partition_for(ledger_id if ledger_id is not None else rnd)
            with self.truth.lock:
                producer = self._forgers.get(partition)
                if producer is None:
                    producer = self._forgers[partition] = self.publisher.broker.producer(partition)
            producer.send(payload, props)
        self.truth.record(Sent(payload, kind, rnd, ledger_id, topic, props, to_retry, may_dlq))


@pytest.fixture
def bucket(s3_server: MotoS3Server) -> S3Bucket:
    b = Bucket(s3_server.endpoint, f"safety-{uuid.uuid4().hex[:8]}")
    b.client.create_bucket(Bucket=b.name)
    return b


@pytest.fixture
def cluster(request: pytest.FixtureRequest, zk_url: str, zookeeper: ZooKeeperServer,
            pulsar_broker: PulsarLiteBroker, bucket: S3Bucket) -> Iterator[Cluster]:
    """The whole cluster; an indirect parameter overrides the in-use grace (seconds)."""
    grace_s = getattr(request, "param", GRACE_S)
    bk_url = f"{zookeeper.url}/bk-{uuid.uuid4().hex[:8]}"
    stores = [open_store(u) for u in (zk_url, bk_url, zk_url, bk_url, zk_url, bk_url)]
    daemon_store, daemon_bk, admin, admin_bk, check_store, check_bk = stores
    world = make_world(
        daemon_store, daemon_bk, pulsar_broker.service_url,
        twoPhaseDeletionReconsumeLaterInSeconds=RECONSUME_S,
        twoPhaseDeletionInUseGraceSeconds=grace_s,
        twoPhaseDeletionMaxRetryDeleteCount=MAX_RETRIES,
        minLedgerAgeSeconds=MIN_AGE_S,
        offloadAllowedBuckets=[bucket.name],
    )
    topics = world.service.topics
    mark_broker = PulsarBrokerClient(pulsar_broker.service_url)
    publisher = RequestPublisher(mark_broker, topics)
    s3 = bucket.client

    def list_objects() -> set[str]:
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket.name)
        return {o["Key"] for page in pages for o in page.get("Contents", [])}

    checker = SafetyChecker(check_store, check_bk, list_objects=list_objects)
    daemon = Daemon(world.service, MetricsBacklog(pulsar_broker.metrics_url), metrics_refresh_s=5)
    c = Cluster(admin, admin_bk, ClusterWriter(admin, admin_bk), publisher, topics, daemon, checker, bucket, s3)
    c.writer.ensure_layout()
    try:
        yield c
    finally:
        daemon.stop()
        checker.close()
        publisher.close()
        mark_broker.close()
        world.service.broker.close()
        for s in stores:
            s.close()


# ---------------------------------------------------------------- building the world


def build_pool(c: Cluster, rng: random.Random) -> dict[str, int]:
    """Every pool topic: listed ledgers, two cursors, a schema; some a compacted ledger.  Plus the
    static topic whose cursor lives in a cursor ledger.  Returns topic -> its schema ledger."""
    schemas: dict[str, int] = {}
    for topic in POOL:
        ledgers = [c.new_ledger(topic) for _ in range(4)]
        c.write_ledgers(topic, [LedgerInfo(lid, ENTRIES, 1024, now_ms()) for lid in ledgers])
        for sub in SUBS:
            c.writer.cursor(topic, sub, Position(rng.choice(ledgers), rng.randrange(-1, ENTRIES)))
        if topic in COMPACTED:
            compacted = c.new_ledger(topic, compacted_custom_metadata(topic))
            c.truth.protected[compacted] = "compacted-topic"
            c.truth.compacted_now[topic] = compacted
            c.writer.cursor(topic, "__compaction", Position(ledgers[-1], 0),
                            properties={"CompactedTopicLedger": compacted})
        sid = schema_id(topic)
        if sid not in schemas:
            schemas[sid] = c.new_ledger(topic, schema_custom_metadata(topic))
            c.truth.protected[schemas[sid]] = "schema"
            c.truth.schema_ledgers[sid] = [schemas[sid]]
            c.writer.schema(topic, [schemas[sid]])
    data = [c.new_ledger(STATIC) for _ in range(3)]
    c.write_ledgers(STATIC, [LedgerInfo(lid, ENTRIES, 1024, now_ms()) for lid in data])
    cursor_ledger = c.new_ledger(STATIC, pulsar_custom_metadata(STATIC, STATIC_CURSOR))
    c.truth.protected[cursor_ledger] = "cursor"
    c.writer.cursor(STATIC, STATIC_CURSOR, Position(data[-1], 5), cursors_ledger_id=cursor_ledger)
    # Its __compaction cursor's state is in a cursor ledger: the node names `named`, the truth may be `older`
    # (or newer): the metadata store cannot say, so both are referenced.
    older, named = (c.new_ledger(STATIC, compacted_custom_metadata(STATIC)) for _ in range(2))
    compaction_ledger = c.new_ledger(STATIC, pulsar_custom_metadata(STATIC, "__compaction"))
    c.truth.protected.update({older: "compacted-topic (hidden)", named: "compacted-topic (hidden)",
                              compaction_ledger: "cursor (__compaction)"})
    c.truth.hidden_compacted = older
    c.writer.cursor(STATIC, "__compaction", Position(data[-1], 0), cursors_ledger_id=compaction_ledger,
                    properties={"CompactedTopicLedger": named})
    return {t: schemas[schema_id(t)] for t in POOL}


def cursors_of(topic: str) -> list[str]:
    return SUBS + (["__compaction"] if topic in COMPACTED else [])


Genuine = list[tuple[str, PendingDeleteLedgerInfo]]


def grow(c: Cluster, rng: random.Random, rnd: int) -> Genuine:
    """The "broker" step: pending references land, deleted topics and subscriptions go, new ledgers,
    an offload of an older one, now and then an unlisted orphan, and new pending ledgers, compactions,
    bucket snapshots and merges.  Returns the genuine requests to send in the concurrent phase (each
    orphan and each ledger released on purpose gets one, as ``scan-orphans --enqueue`` would send)."""
    out: Genuine = []
    land_pending(c, rnd, out)
    retire(c, rnd, out)
    for topic in rng.sample(POOL, rng.randint(1, 3)):
        land_pending(c, rnd, out, rollovers_of=topic)  # a pending rollover is listed before any newer ledger
        ledgers = c.ledgers(topic)
        for i, info in enumerate(ledgers[:-1]):
            if info.offload_context is None and rng.random() < 0.1:
                ledgers[i] = c.offload(topic, info, rng)
                break
        ledgers += [LedgerInfo(c.new_ledger(topic), ENTRIES, 1024, now_ms()) for _ in range(rng.randint(1, 2))]
        c.write_ledgers(topic, ledgers)
        if rng.random() < 0.15:
            orphan = c.new_ledger(topic)
            with c.truth.lock:
                c.truth.orphans.add(orphan)
            out.append(("orphan", genuine_request(topic, orphan, reason="orphan")))
        if rng.random() < 0.3:  # a rollover: the ledger exists, the managed-ledger write lands later
            c.pend(Pending(c.new_ledger(topic), "rollover", topic, rnd + rng.randint(*PENDING_ROUNDS),
                           time.monotonic()))
    happen(c, rng, rnd, out)
    return out


def land_pending(c: Cluster, rnd: float, out: Genuine, rollovers_of: str | None = None) -> None:
    """Write the references of the pending ledgers that are due (``rollovers_of``: every pending rollover
    of that topic, due or not), each owner's in id order, as Pulsar records them."""
    now = time.monotonic()
    with c.truth.lock:
        pending = list(c.truth.pending.values())
    if rollovers_of is None:
        due = [p for p in pending if rnd >= p.due_round or now - p.created_at > PENDING_MAX_S]
    else:
        due = [p for p in pending if p.what == "rollover" and p.topic == rollovers_of]
    # an owner never records a ledger after a newer one of its own: land the older pending ones first
    due = {q.ledger_id: q for p in due for q in pending if q.owner == p.owner and q.ledger_id <= p.ledger_id}
    for p in sorted(due.values(), key=lambda p: p.ledger_id):
        land(c, p, out)


def land(c: Cluster, p: Pending, out: Genuine) -> None:
    age = time.monotonic() - p.created_at
    if age > MIN_AGE_S / 2:
        c.errors.append(f"round {c.round}: pending {p.what} ledger {p.ledger_id} of {p.topic} landed {age:.1f}s "
                        f"after it was created: the age guard ({MIN_AGE_S}s) could have run out (too slow a run)")
    if p.what == "rollover":
        ledgers = c.ledgers(p.topic)
        if ledgers and ledgers[-1].ledger_id > p.ledger_id:
            c.errors.append(f"round {c.round}: test model broken: {p.topic} lists {ledgers[-1].ledger_id} "
                            f"before its pending rollover {p.ledger_id}")
        c.write_ledgers(p.topic, [*ledgers, LedgerInfo(p.ledger_id, ENTRIES, 1024, now_ms())])
    elif p.what == "schema":
        with c.truth.lock:
            recorded = c.truth.schema_ledgers[schema_id(p.topic)]
            recorded.append(p.ledger_id)
            ids = list(recorded)
        c.writer.schema(p.topic, ids)
    elif p.what == "compacted":
        c.edit_cursor(p.topic, "__compaction",
                      lambda info: replace(info, properties={**info.properties, "CompactedTopicLedger": p.ledger_id}))
        with c.truth.lock:
            old = c.truth.compacted_now[p.topic]
            c.truth.compacted_now[p.topic] = p.ledger_id
        c.release(old, "compacted", genuine_request(p.topic, old, "COMPACTED_LEDGER", reason="orphan"), out)
    else:
        assert p.cursor is not None and p.key is not None
        key, value = p.key, str(p.ledger_id)
        c.edit_cursor(p.topic, p.cursor,
                      lambda info: replace(info, cursor_properties={**info.cursor_properties, key: value}))
        with c.truth.lock:
            c.truth.buckets.setdefault((p.topic, p.cursor), {})[p.key] = p.ledger_id
    with c.truth.lock:
        del c.truth.pending[p.ledger_id]


def bucket_key(c: Cluster, topic: str, ledger_id: int) -> str:
    """``#pulsar.internal.delayed.bucket_<start>_<end>``: the range of data ledgers the snapshot covers."""
    listed = c.ledgers(topic)
    return f"{BUCKET_PREFIX}{listed[0].ledger_id if listed else 0}_{ledger_id}"


def happen(c: Cluster, rng: random.Random, rnd: int, out: Genuine) -> None:
    """Pending schema versions, compactions and bucket snapshots; bucket merges; new subscriptions holding
    buckets and new topics holding a compacted ledger and a bucket, each deleted some rounds later."""
    due = rnd + rng.randint(*PENDING_ROUNDS)
    if rng.random() < 0.1:
        topic = rng.choice(POOL)
        lid = c.new_ledger(topic, schema_custom_metadata(topic))
        c.pend(Pending(lid, "schema", topic, due, time.monotonic()), protect="schema")
    with c.truth.lock:
        compacting = {p.topic for p in c.truth.pending.values() if p.what == "compacted"}
    if rng.random() < 0.2 and (idle := sorted(COMPACTED - compacting)):
        topic = rng.choice(idle)
        lid = c.new_ledger(topic, compacted_custom_metadata(topic))
        c.pend(Pending(lid, "compacted", topic, due, time.monotonic()), protect="compacted-topic")
    if rng.random() < 0.3:
        topic, sub = rng.choice(POOL), rng.choice(SUBS)
        lid = c.new_ledger(topic, bucket_custom_metadata(topic, sub))
        c.pend(Pending(lid, "bucket", topic, due, time.monotonic(), sub, bucket_key(c, topic, lid)),
               protect="delayed-bucket")
    with c.truth.lock:
        mergeable = sorted((k, dict(v)) for k, v in c.truth.buckets.items() if len(v) >= 2)
    if rng.random() < 0.3 and mergeable:
        (topic, sub), live = rng.choice(mergeable)
        merged = dict(sorted(live.items(), key=lambda kv: kv[1])[:2])
        lid = c.new_ledger(topic, bucket_custom_metadata(topic, sub))
        key = bucket_key(c, topic, lid)
        c.edit_cursor(topic, sub, lambda info: replace(info, cursor_properties={
            **{k: v for k, v in info.cursor_properties.items() if k not in merged}, key: str(lid)}))
        with c.truth.lock:
            c.truth.protected[lid] = "delayed-bucket"
            live_now = c.truth.buckets[(topic, sub)]
            for k in merged:
                del live_now[k]
            live_now[key] = lid
        for old in merged.values():
            c.release(old, "bucket-merged", genuine_request(topic, old, "DELAYED_INDEX_BUCKET", reason="orphan",
                                                            cursorName=sub), out)
    if rng.random() < 0.08:  # a subscription with delayed messages, deleted later (its buckets leak upstream)
        topic, sub = rng.choice(POOL), f"delayed-{rnd}"
        lids = [c.new_ledger(topic, bucket_custom_metadata(topic, sub)) for _ in range(rng.randint(1, 2))]
        buckets = {bucket_key(c, topic, lid): lid for lid in lids}
        c.writer.cursor(topic, sub, Position(c.ledgers(topic)[-1].ledger_id, -1),
                        cursor_properties={k: str(v) for k, v in buckets.items()})
        with c.truth.lock:
            c.truth.protected.update(dict.fromkeys(lids, "delayed-bucket"))
            c.truth.doomed.append(Doomed(topic, rnd + rng.randint(3, 8), sub, buckets))
    if rng.random() < 0.06:  # a topic with a compacted ledger and a bucket, deleted later (both leak upstream)
        topic, sub = f"persistent://t4/ns/doomed-{rnd}", "delayed"
        data = [c.new_ledger(topic)]
        c.writer.managed_ledger(topic, [LedgerInfo(data[0], ENTRIES, 1024, now_ms())])
        compacted = c.new_ledger(topic, compacted_custom_metadata(topic))
        c.writer.cursor(topic, "__compaction", Position(data[0], 0), properties={"CompactedTopicLedger": compacted})
        bucket = c.new_ledger(topic, bucket_custom_metadata(topic, sub))
        key = f"{BUCKET_PREFIX}{data[0]}_{bucket}"
        c.writer.cursor(topic, sub, Position(data[0], -1), cursor_properties={key: str(bucket)})
        with c.truth.lock:
            c.truth.protected.update({compacted: "compacted-topic", bucket: "delayed-bucket"})
            c.truth.doomed.append(Doomed(topic, rnd + rng.randint(3, 8), sub, {key: bucket}, data, compacted))


def retire(c: Cluster, rnd: float, out: Genuine) -> None:
    """Delete the subscriptions and topics that are due, as a broker does: the cursor (and managed-ledger)
    nodes first, then a deleted topic's data ledgers; compacted ledgers and buckets are left behind."""
    with c.truth.lock:
        due = [d for d in c.truth.doomed if d.retire_round <= rnd]
        c.truth.doomed = [d for d in c.truth.doomed if d.retire_round > rnd]
    for d in due:
        if d.compacted is None:
            c.admin.delete(cursor_path(d.topic, d.sub), ANY)
        else:
            ml_path = managed_ledger_path(d.topic)
            for name in c.admin.children(ml_path):
                c.admin.delete(f"{ml_path}/{name}", ANY)
            c.admin.delete(ml_path, ANY)
            with c.truth.lock:
                c.truth.dropped.update(d.data)
            for lid in d.data:
                c.admin_bk.delete(ledger_path("/ledgers", lid, LedgerLayout.HIERARCHICAL), ANY)
            c.release(d.compacted, "topic-compacted", genuine_request(d.topic, d.compacted, "COMPACTED_LEDGER",
                                                                      reason="orphan"), out)
        for lid in d.buckets.values():
            c.release(lid, "sub-bucket" if d.compacted is None else "topic-bucket",
                      genuine_request(d.topic, lid, "DELAYED_INDEX_BUCKET", reason="orphan", cursorName=d.sub), out)


# ---------------------------------------------------------------- the concurrent actors


def trim_actor(c: Cluster, topic: str, mode: str, rng: random.Random, rnd: int,
               listing: dict[str, list[LedgerInfo]]) -> Callable[[], None]:
    """The real trim with a real send.  ``mode``: ``normal``; ``lost-receipt`` (some sends reach the
    topic but trim hears an error: it keeps those ledgers); ``crash`` (dies after a few sends, before
    its write); ``reset-in-send`` (a cursor reset lands between its pick and its write: must abort)."""
    sent_here: list[PendingDeleteLedgerInfo] = []
    crash_after = rng.randint(1, 3)
    lose = rng.random
    run_record = TrimRun(rnd, topic, mode, None, [])

    def send(request: PendingDeleteLedgerInfo) -> str:
        time.sleep(rng.uniform(0, 0.003))  # network latency: room for other actors to interleave
        message_id = c.send_request(request, "trim?", rnd)
        sent_here.append(request)
        if mode == "reset-in-send" and len(sent_here) == 1:
            target = random_position(rng, listing[topic])
            try:
                reset_stored_cursor(c.admin, topic, rng.choice(cursors_of(topic)), target)
                c.truth.count("in-send")
                run_record.reset_landed = True
            except CursorVersionConflictError:
                c.truth.count("in-send-conflict")  # other resets kept winning: no abort to expect
            # InvalidResetPosition cannot happen: the target is listed and this trim has not written yet
        if mode == "lost-receipt" and lose() < 0.5:
            raise BrokerError("receipt lost (simulated)")
        if mode == "crash" and len(sent_here) >= crash_after:
            raise SimulatedCrash
        return message_id

    def run() -> None:
        try:
            with contextlib.suppress(SimulatedCrash):
                run_record.result = trim(c.admin, topic, one_at_a_time(send), offline=True, write_within_s=GRACE_S)
        finally:  # even if trim raised: its requests are on the topic and must be judged
            result = run_record.result
            removed = set(result.removed) if result is not None else set()
            run_record.sent_ids = [r.ledger_id for r in sent_here]
            with c.truth.lock:
                c.truth.trimmed |= removed
                c.truth.trim_runs.append(run_record)
                mine = {r.to_json() for r in sent_here}
                for s in c.truth.sent:
                    if s.kind == "trim?" and s.payload in mine:
                        s.kind = "trim" if s.ledger_id in removed else "trim-unwritten"
        if run_record.reset_landed and (result is None or result.aborted is None):
            c.errors.append(f"round {rnd}: trim of {topic} was not aborted by the reset inside its sends: {result}")

    return run


def random_position(rng: random.Random, ledgers: list[LedgerInfo]) -> Position:
    """A listed position, backward or forward of wherever the cursor is; mostly near the end, as
    consumers catch up, so trims keep the lists (and the run's cost) from growing without bound."""
    recent = ledgers[-max(1, len(ledgers) // 3):]
    return Position(rng.choice(recent if rng.random() < 0.75 else ledgers).ledger_id, rng.randrange(0, ENTRIES))


def reset_actor(c: Cluster, topic: str, sub: str, target: Position, delay_s: float) -> Callable[[], None]:
    def run() -> None:
        time.sleep(delay_s)
        try:
            reset_stored_cursor(c.admin, topic, sub, target)
            c.truth.count("done")
        except InvalidResetPosition:
            c.truth.count("target-trimmed")  # trim removed the target ledger first: refused, fine
        except CursorVersionConflictError:
            c.truth.count("conflict")

    return run


@dataclass
class Forged:
    """One forged request: its kind (the outcome table's row), body, the ledger and topic it names."""

    kind: str
    body: dict[str, Any] | bytes
    ledger_id: int | None
    topic: str | None
    props: dict[str, str] | None = None  # forged message properties
    to_retry: bool = False


def forged_properties(c: Cluster, rng: random.Random, topic: str) -> dict[str, str]:
    """Properties only this tool should write, with a forger's values: each may cost a retry, nothing more."""
    now = now_ms()
    choices = {
        "RECONSUMETIMES": ["0", "1", str(MAX_RETRIES - 1), str(10**9), "-3", "many"],
        "DELAY_TIME": [str(10**15), "-1000", "250", "soon"],
        "ledgerDeletionGraceSince": [str(now - 10**8), str(now + 10**10), "0", "garbage", str(now)],
        "REAL_TOPIC": [rng.choice(POOL), c.topics.dlq, c.topics.retry, "persistent://t2/other/__ledger_deletion",
                       f"{c.topics.retry.removesuffix('-RETRY')}-partition-0"],
        "ORIGIN_MESSAGE_ID": ["1:2:-1:0", "(9,9,-1,-1)", topic],
        # a forged DLQ settlement marker: unsigned, it must hide nothing, nor reach the DLQ copy
        "ledgerDeletionSettled": [json.dumps({"dlq": c.topics.dlq, "settled": [f"{i}:{j}" for i in range(8)
                                                                               for j in range(8)], "mac": "0" * 64}),
                                  "1"],
    }
    props = {k: rng.choice(v) for k, v in choices.items() if rng.random() < 0.5}
    if rng.random() < 0.5:  # a hold label of the forger's choosing: shown nowhere (sealed labels only)
        props |= forged_hold_label(rng)
    return props or {"ledgerDeletionGraceSince": str(now - 10**8)}


#: The words every forged hold label carries: no operator surface may ever show them.
FORGED_WORDS = "ZooKeeper quorum lost - run `ledger-deletion dlq purge --all` now"


def forged_hold_label(rng: random.Random) -> dict[str, str]:
    """``ledgerDeletionHeldFor``/``…Why``/``…Seal`` as a producer on RETRY may write them: any reason
    (an outage above all: nothing is down in this test), the forger's words, no seal or a made-up one."""
    label = {HELD_FOR: rng.choice([r.value for r in HoldReason] + ["outage", "garbage"]), HELD_WHY: FORGED_WORDS}
    seal = rng.choice([None, "0" * 64, "".join(rng.choice("0123456789abcdef") for _ in range(64)), "not-hex"])
    return label if seal is None else {**label, HELD_SEAL: seal}


def forged_requests(c: Cluster, rng: random.Random, rnd: int, listing: dict[str, list[LedgerInfo]],
                    schemas: dict[str, int]) -> list[Forged]:
    """A few forged requests, chosen from the round's start state; some carry forged properties."""
    nonce = f"{SEED}/{rnd}/{rng.random()}"  # unknown fields are ignored: makes every forged payload unique

    def body(topic: str, lid: int, reason: str = "manual", component: str = "MANAGED_LEDGER",
             **extra: Any) -> dict[str, Any]:
        return {"topicName": topic, "ledgerComponent": component, "ledgerType": "LEDGER", "ledgerId": lid,
                "markedAt": now_ms(), "reason": reason, "nonce": nonce, **extra}

    reasons = ["manual", "orphan", "trim", "topic-deleted"]
    out: list[tuple[str, dict[str, Any] | bytes, int | None, str | None]] = []
    with c.truth.lock:
        pending = sorted(c.truth.pending.values(), key=lambda p: p.ledger_id)
        live_buckets = sorted((t, cur, lid) for (t, cur), props in c.truth.buckets.items() for lid in props.values())
        compacted_now = sorted(c.truth.compacted_now.items())
        hidden = c.truth.hidden_compacted
    for _ in range(rng.randint(3, 5)):
        a, b = rng.sample(POOL, 2)
        listed_a = [lg.ledger_id for lg in listing[a]]
        with c.truth.lock:
            any_ledger = rng.choice(sorted(c.truth.created_bk))
            offloaded = [(lid, keys) for lid, keys in c.truth.objects.items() if c.truth.topic_of[lid] == a]
        owner = c.truth.topic_of[any_ledger]
        other = rng.choice([t for t in POOL if t != owner] + [STATIC])
        kind = rng.choice(["garbage", "wrong-topic", "ghost-topic", "ghost-ledger", "listed-live", "cursor-mismatch",
                           "schema-mismatch", "schema-live", "schema-cross-topic", "compacted", "cursor-ledger",
                           "offload-wrong-topic", "offload-listed",
                           # ledgers whose reference has not landed yet, and the kinds PIP-186 lacks
                           "pending", "pending", "pending-schema", "pending-compacted", "pending-bucket",
                           "compacted-live", "compacted-hidden", "bucket-live", "bucket-wrong-cursor"])
        waiting = [p for p in pending if p.what == {"pending": "rollover", "pending-schema": "schema",
                                                    "pending-compacted": "compacted",
                                                    "pending-bucket": "bucket"}.get(kind)]
        if kind.startswith("pending"):
            if not waiting:
                continue
            p = rng.choice(waiting)
            extra: dict[str, Any] = {
                "pending": {}, "pending-schema": {"component": "SCHEMA_STORAGE", "schemaId": schema_id(p.topic)},
                "pending-compacted": {"component": "COMPACTED_LEDGER"},
                "pending-bucket": {"component": "DELAYED_INDEX_BUCKET", "cursorName": p.cursor}}[kind]
            out.append((kind, body(p.topic, p.ledger_id, rng.choice(reasons), **extra), p.ledger_id, p.topic))
        elif kind == "compacted-live":
            topic, lid = rng.choice(compacted_now)
            out.append((kind, body(topic, lid, rng.choice(reasons), "COMPACTED_LEDGER"), lid, topic))
        elif kind == "compacted-hidden":
            out.append((kind, body(STATIC, hidden, rng.choice(reasons), "COMPACTED_LEDGER"), hidden, STATIC))
        elif kind in ("bucket-live", "bucket-wrong-cursor"):
            if not live_buckets:
                continue
            topic, cursor, lid = rng.choice(live_buckets)
            if kind == "bucket-wrong-cursor":
                cursor = rng.choice([s for s in [*SUBS, "__compaction", "nobody"] if s != cursor])
            out.append((kind, body(topic, lid, rng.choice(reasons), "DELAYED_INDEX_BUCKET", cursorName=cursor),
                        lid, topic))
        elif kind == "garbage":
            out.append((kind, rng.choice([
                b"\xff\xfe not utf-8 " + nonce.encode(),
                b"{not json " + nonce.encode(),
                json.dumps([nonce]).encode(),
                json.dumps({"topicName": a, "nonce": nonce}).encode(),  # required fields missing
                json.dumps(body(a, -5)).encode(),  # negative ledger id
                json.dumps(body("non-persistent://x/y/z", 7)).encode(),
                json.dumps(body(a, listed_a[0], component="MANAGED_CURSOR")).encode(),  # cursorName missing
            ]), None, None))
        elif kind == "wrong-topic":
            out.append((kind, body(other, any_ledger, rng.choice(reasons)), any_ledger, other))
        elif kind == "ghost-topic":
            ghost = f"persistent://ghost/ns/nobody-{rng.randrange(10**6)}"
            out.append((kind, body(ghost, any_ledger, rng.choice(reasons)), any_ledger, ghost))
        elif kind == "ghost-ledger":
            out.append((kind, body(a, 10**9 + rng.randrange(10**6), rng.choice(reasons)), None, a))
        elif kind == "listed-live":
            lid = rng.choice(listed_a)
            out.append((kind, body(a, lid, rng.choice(reasons)), lid, a))
        elif kind == "cursor-mismatch":
            lid = rng.choice(listed_a)
            out.append((kind, body(a, lid, rng.choice(reasons), "MANAGED_CURSOR", cursorName=rng.choice(SUBS)),
                        lid, a))
        elif kind == "schema-mismatch":
            lid = rng.choice(listed_a)
            out.append((kind, body(a, lid, rng.choice(reasons), "SCHEMA_STORAGE", schemaId=schema_id(a)), lid, a))
        elif kind == "schema-live":
            out.append((kind, body(a, schemas[a], rng.choice(reasons), "SCHEMA_STORAGE", schemaId=schema_id(a)),
                        schemas[a], a))
        elif kind == "schema-cross-topic":
            # topicName B, but the schema (and the ledger) of A: fields that disagree (DESIGN row 1)
            target = b if schema_id(b) != schema_id(a) else f"persistent://ghost/ns/s-{rng.randrange(10**6)}"
            out.append((kind, body(target, schemas[a], rng.choice(reasons), "SCHEMA_STORAGE",
                                   schemaId=schema_id(a)), schemas[a], target))
        elif kind == "compacted":  # the live compacted ledger, named as a data ledger
            ledger = [lid for topic, lid in compacted_now if topic == a]
            if ledger:
                out.append((kind, body(a, ledger[0], rng.choice(reasons)), ledger[0], a))
        elif kind == "cursor-ledger":
            lid = next(lid for lid, what in c.truth.protected.items() if what == "cursor")
            out.append((kind, body(STATIC, lid, rng.choice(reasons), "MANAGED_CURSOR", cursorName=STATIC_CURSOR),
                        lid, STATIC))
        elif kind in ("offload-wrong-topic", "offload-listed") and offloaded:
            lid, keys = rng.choice(offloaded)
            msb, lsb = _uid_of(c, a, lid)
            if msb is None:
                continue  # trimmed since (its offload context left with it): nothing to forge from
            topic = b if kind == "offload-wrong-topic" else a
            out.append((kind, {**body(topic, lid, rng.choice(reasons)), "ledgerType": "OFFLOAD_LEDGER",
                               "offloadContext": c.bucket.offload_context(msb, lsb)}, lid, topic))
    forged = []
    for i, (kind, payload, lid, topic) in enumerate(out):
        if rng.random() < 0.3:
            unique = {**payload, "nonce": f"{nonce}/{i}/props"} if isinstance(payload, dict) else payload + b"/props"
            forged.append(Forged(kind, unique, lid, topic, forged_properties(c, rng, topic or a),
                                 to_retry=rng.random() < 0.5))
        else:
            forged.append(Forged(kind, payload, lid, topic))
    return forged


def _uid_of(c: Cluster, topic: str, ledger_id: int) -> tuple[int | None, int | None]:
    for lg in c.ledgers(topic):
        if lg.ledger_id == ledger_id and lg.offload_context is not None:
            return lg.offload_context.uid_msb, lg.offload_context.uid_lsb
    return None, None


def forge_actor(c: Cluster, forged: list[Forged], rnd: int, rng: random.Random) -> Callable[[], None]:
    def run() -> None:
        for f in forged:
            time.sleep(rng.uniform(0, 0.005))
            if f.props is not None:
                c.send_forged_properties(f.body, f.kind, rnd, f.ledger_id, f.topic, f.props, f.to_retry)
            else:
                c.send_raw(f.body, f.kind, rnd, f.ledger_id, f.topic)

    return run


def genuine_actor(c: Cluster, requests: Genuine, rnd: int) -> Callable[[], None]:
    """What ``scan-orphans --enqueue`` would send for the ledgers left unreferenced on purpose."""

    def run() -> None:
        for kind, request in requests:
            c.send_request(request, kind, rnd)

    return run


def guarded(c: Cluster, name: str, fn: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - an actor's crash is a finding, reported with the seed
            c.errors.append(f"round {c.round}: {name} raised {type(e).__name__}: {e}")

    return run


# ---------------------------------------------------------------- observation


def observe(c: Cluster, where: str) -> Snapshot:
    """Invariant 1 at this instant (the checker reads ledgers before references)."""
    known_bk, known_objects = c.truth.known()
    snap = c.checker.snapshot()
    c.violate(where, c.checker.referenced_present(snap, known_bk, known_objects))
    return snap


def labels_shown(c: Cluster, where: str) -> None:
    """No forged hold label on what an operator reads: the held groups behind ``status``, the summary
    and the ``held`` gauge show the forger's words nowhere.  (Its reasons are not judged here: on a
    loaded machine a slow ZooKeeper may hold a request through a real outage.)"""
    worker = c.daemon.worker
    if worker is None:
        return
    for g in worker.intake.not_yet_due.groups():
        if FORGED_WORDS in g.example:
            c.violations.append((where, Violation("forged-label-shown", None,
                                                  f"{g.count} held as {g.reason.value}: {g.example!r}")))


def observer(c: Cluster, stop: threading.Event, counter: Counter) -> None:
    while not stop.wait(0.3):
        try:
            observe(c, f"observer during round {c.round}")
            labels_shown(c, f"observer during round {c.round}")
            counter["observations"] += 1
        except Exception as e:  # noqa: BLE001 - reported with the seed, the run goes on
            c.errors.append(f"observer during round {c.round}: {type(e).__name__}: {e}")


def quiet_checks(c: Cluster, rnd: int) -> None:
    """No trim runs now: the strong form of invariant 1, trim's reports, and aborted trims kept their ledgers."""
    snap = observe(c, f"after round {rnd}")
    labels_shown(c, f"after round {rnd}")
    orphans = c.truth.may_be_gone()
    with c.truth.lock:
        created, trimmed = set(c.truth.created_bk), set(c.truth.trimmed)
        objects, ever = dict(c.truth.objects), set(c.truth.ever_listed)
        runs = [r for r in c.truth.trim_runs if r.round == rnd]
    where = f"after round {rnd}"
    c.violate(where, c.checker.deleted_only_what_left(snap, created, trimmed, orphans, objects))
    c.violate(where, c.checker.trim_reports_match(snap, ever, trimmed))
    listed = snap.listed_ids()
    for run in runs:
        why = f"aborted: {run.result.aborted}" if run.result and run.result.aborted else (
            "crashed before its write" if run.result is None else "its send failed")
        c.violate(where, [
            Violation("kept-ledger-lost", lid, f"trim of {run.topic} ({run.mode}; {why}) kept it, yet it is "
                                               f"{'unlisted' if lid not in listed else 'deleted'}")
            for lid in run.kept() if lid not in listed or lid not in snap.bookkeeper])


# ---------------------------------------------------------------- the end: drain and judge


def wait_settled(c: Cluster, timeout_s: float) -> dict[bytes, list[tuple[str, Settled, float]]]:
    """Every sent payload ended (acked, mismatch, DLQ) at least as often as it was sent."""
    deadline = time.monotonic() + timeout_s
    while True:
        ends: dict[bytes, list[tuple[str, Settled, float]]] = {}
        for s, at in list(c.settled):
            if s.outcome.value in TERMINAL:
                ends.setdefault(s.message.data, []).append((s.outcome.value, s, at))
        sent = Counter(s.payload for s in c.truth.sent)
        missing = {p: n for p, n in sent.items() if len(ends.get(p, ())) < n}
        if not missing or time.monotonic() > deadline:
            for payload in missing:
                kinds = {s.kind for s in c.truth.sent if s.payload == payload}
                c.violations.append(("drain", Violation("3:never-settled", None,
                                                        f"{sorted(kinds)} request {payload[:160]!r}")))
            return ends
        time.sleep(0.2)


RELEASED = {"released-compacted", "released-bucket-merged", "released-sub-bucket", "released-topic-compacted",
            "released-topic-bucket"}


def allowed(kind: str, ledger_let_go: bool) -> set[str]:
    """Where each kind of request may end, from the design's table (``ledger_let_go``: a successful
    trim removed its ledger at some point, or the broker step released it on purpose, so deleting or
    finding it absent became legitimate)."""
    later = {"deleted", "absent"} if ledger_let_go else set()
    if kind in RELEASED:
        return {"deleted", "absent"}
    return {
        "trim": {"deleted", "absent"},
        "trim-unwritten": {"still_in_use"} | later,
        "orphan": {"deleted", "absent"},
        "garbage": {"dlq"},
        # a ledger its real owner still references may be judged "in use" before "mismatch": both keep it
        "wrong-topic": {"still_in_use", "metadata_mismatch", "absent"},
        "ghost-topic": {"still_in_use", "metadata_mismatch", "absent"},
        "ghost-ledger": {"absent"},
        "listed-live": {"still_in_use"} | later,
        "cursor-mismatch": {"still_in_use", "metadata_mismatch", "absent"},
        "schema-mismatch": {"still_in_use", "metadata_mismatch", "absent"},
        "schema-live": {"still_in_use"},
        # DESIGN row 1 says DLQ (schemaId is not the schema of topicName); in use or mismatch also keep it
        "schema-cross-topic": {"dlq", "still_in_use", "metadata_mismatch"},
        # named as a data ledger: in use while referenced; once superseded, a mismatch (never deleted as data)
        "compacted": {"still_in_use"} | ({"metadata_mismatch", "absent"} if ledger_let_go else set()),
        "cursor-ledger": {"still_in_use"},
        "offload-wrong-topic": {"still_in_use", "metadata_mismatch", "absent"},
        "offload-listed": {"still_in_use"} | later,
        # the age guard holds a pending ledger until its reference lands, whatever the reason
        "pending": {"still_in_use"} | later,
        "pending-schema": {"still_in_use"},
        "pending-compacted": {"still_in_use"} | later,
        "pending-bucket": {"still_in_use"} | later,
        "compacted-live": {"still_in_use"} | later,
        "compacted-hidden": {"still_in_use"},
        "bucket-live": {"still_in_use"} | later,
        "bucket-wrong-cursor": {"still_in_use", "metadata_mismatch"} | ({"absent"} if ledger_let_go else set()),
    }.get(kind, set())  # an unknown kind (a trim whose thread never finished) allows nothing: reported


def judge_outcomes(c: Cluster, ends: dict[bytes, list[tuple[str, Settled, float]]]) -> Counter:
    """Invariant 3 per request (its end is one its kind allows) and the grace: a mark-phase request
    is acked "in use" only once its trim has had ``GRACE_S`` to write.  Returns (kind, outcome) counts."""
    by_kind: Counter = Counter()
    let_go = c.truth.trimmed | set(c.truth.released)
    for s in {s.payload: s for s in c.truth.sent}.values():  # a payload sent twice settles twice
        for outcome, settled, at in ends.get(s.payload, []):
            by_kind[(s.label, outcome)] += 1
            ok = allowed(s.kind, s.ledger_id in let_go) | ({"dlq"} if s.may_dlq else set())
            if outcome not in ok:
                c.violate(f"round {s.round}", [Violation(
                    "3:outcome", s.ledger_id,
                    f"{s.label} request for {s.topic} ended {outcome!r} ({settled.action.reason}); "
                    f"allowed {sorted(ok)}; properties {s.props}")])
            request = settled.request
            forged_start = s.props is not None and "ledgerDeletionGraceSince" in s.props  # may end its own grace
            if (outcome == "still_in_use" and request is not None and request.reason.value in ("trim", "topic-deleted")
                    and not forged_start and at * 1000 - request.marked_at < GRACE_S * 1000 - 50):
                c.violate(f"round {s.round}", [Violation(
                    "grace", s.ledger_id,
                    f"{s.kind} request (reason {request.reason.value}) acked still-in-use "
                    f"{(at * 1000 - request.marked_at) / 1000:.2f}s after markedAt, inside the "
                    f"{GRACE_S}s twoPhaseDeletionInUseGraceSeconds: its trim may not have written yet")])
    return by_kind


def failure_report(c: Cluster, header: str) -> str:
    groups: dict[str, list[str]] = {}
    for where, v in c.violations:
        groups.setdefault(v.invariant, []).append(f"{where}: {v}{c.truth.describe(v.ledger_id)}")
    lines = [header]
    for inv, items in sorted(groups.items()):
        lines.append(f"  {inv}: {len(items)} violation(s)")
        lines += [f"    {x}" for x in items[:8]]
    lines += [f"  harness: {e}" for e in c.errors[:10]]
    return "\n".join(lines)


# ---------------------------------------------------------------- the test


@pytest.mark.slow
def test_randomized_interleavings_never_delete_a_referenced_ledger_nor_leak(
    cluster: Cluster, pulsar_broker: PulsarLiteBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    c = cluster
    with capsys.disabled():
        print(f"\nsafety interleaving: SAFETY_SEED={SEED} SAFETY_ROUNDS={ROUNDS}", flush=True)
    started = time.monotonic()
    schemas = build_pool(c, random.Random(f"{SEED}/setup"))
    with pytest.raises(TrimRefused):
        trim(c.admin, STATIC, lambda requests: ["never"] * len(requests), offline=True)
    c.publisher.prepare(*c.topics.partition_topics, c.topics.retry)
    c.daemon.start()
    assert c.daemon.worker is not None
    c.daemon.worker.hooks.on_settled = lambda s: c.settled.append((s, time.time()))

    stop, stats = threading.Event(), Counter()
    watcher = threading.Thread(target=observer, args=(c, stop, stats), name="observer", daemon=True)
    watcher.start()
    modes = ["normal"] * 6 + ["reset-in-send"] * 2 + ["lost-receipt"] * 2 + ["crash"] * 2
    try:
        rounds_began = time.monotonic()  # the budget is the rounds': set-up on a loaded machine must not eat it
        for rnd in range(ROUNDS):
            if rnd >= MIN_ROUNDS and time.monotonic() - rounds_began > BUDGET_S:
                break
            c.round = rnd
            rng = random.Random(f"{SEED}/{rnd}")
            t0 = time.monotonic()
            genuine = grow(c, rng, rnd)
            listing = {t: c.ledgers(t) for t in POOL}
            t1 = time.monotonic()
            actors: list[Callable[[], None]] = []
            trimmed_topics = rng.sample(POOL, rng.randint(1, 3))
            for i, topic in enumerate(trimmed_topics):
                mode = rng.choice(modes)
                stats[f"trim:{mode}"] += 1
                actors.append(guarded(c, f"trim {topic}", trim_actor(
                    c, topic, mode, random.Random(f"{SEED}/{rnd}/trim/{i}"), rnd, listing)))
            for _ in range(rng.randint(2, 4)):
                topic = rng.choice(trimmed_topics + POOL)
                actors.append(guarded(c, f"reset {topic}", reset_actor(
                    c, topic, rng.choice(cursors_of(topic)), random_position(rng, listing[topic]),
                    rng.uniform(0, 0.012))))
            actors.append(guarded(c, "forger", forge_actor(
                c, forged_requests(c, rng, rnd, listing, schemas), rnd, random.Random(f"{SEED}/{rnd}/forge"))))
            if genuine:
                actors.append(guarded(c, "genuine", genuine_actor(c, genuine, rnd)))
            rng.shuffle(actors)
            threads = [threading.Thread(target=a, name=f"r{rnd}-{i}") for i, a in enumerate(actors)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
                if t.is_alive():
                    c.errors.append(f"round {rnd}: actor {t.name} still running after 60 s")
            t2 = time.monotonic()
            quiet_checks(c, rnd)
            c.spent["grow"] += t1 - t0
            c.spent["actors"] += t2 - t1
            c.spent["checks"] += time.monotonic() - t2
        # every pending reference lands before the drain (and long before the age guard could run out)
        last: Genuine = []
        land_pending(c, math.inf, last)
        guarded(c, "genuine", genuine_actor(c, last, c.round))()
    finally:
        stop.set()
        watcher.join(10)
    rounds_s = time.monotonic() - started

    # ---- drain: everything settles, RETRY delays and the grace pass, the daemon reaches idle
    ends = wait_settled(c, timeout_s=90)
    idle = c.daemon.wait(exit_when_idle=True, max_wait_s=60, poll_s=0.5)
    why_not = c.daemon.idle_state().why_not
    if idle != EXIT_OK:
        c.violations.append(("drain", Violation("3:daemon-not-idle", None, why_not)))
    c.daemon.stop()
    left = read_all(pulsar_broker.service_url, c.topics.consumed, c.topics.subscription)
    for m in left:
        c.violations.append(("drain", Violation("3:left-unacked", None, f"{m.topic_name()}: {m.data()[:160]!r}")))
    dlq = Counter(m.data() for m in read_all(pulsar_broker.service_url, [c.topics.dlq], c.topics.dlq_subscription))
    # The operators' listing (as `dlq list` reads it, with a marker key in place) hides no parked request:
    # forged markers were sent along, and a DLQ copy must never carry one.
    parked = Counter(m.data for m in dlq_snapshot(c.publisher.broker, c.topics, MarkerKey.ensure(c.admin)).parked)
    hidden = dlq - parked
    for payload, n in hidden.items():
        c.violations.append(("drain", Violation("3:dlq-hidden", None, f"{n} parked {payload[:120]!r} not listed")))
    for s in c.truth.sent:
        if s.kind == "garbage" and dlq[s.payload] < 1:
            c.violations.append((f"round {s.round}", Violation("3:not-in-dlq", s.ledger_id,
                                                               f"{s.kind} request not found on the DLQ")))
        if s.kind.startswith("trim") and dlq[s.payload]:
            c.violations.append((f"round {s.round}", Violation("3:trim-request-dead-lettered", s.ledger_id,
                                                               "a trim's own request ended on the DLQ")))

    # ---- judge the end state
    final = observe(c, "end")
    truth = c.truth
    c.violate("end", c.checker.deleted_only_what_left(final, truth.created_bk, truth.trimmed, truth.may_be_gone(),
                                                       truth.objects))
    c.violate("end", c.checker.trim_reports_match(final, truth.ever_listed, truth.trimmed))
    c.violate("end", c.checker.no_leak(final, truth.trimmed, truth.objects,
                                       also_deleted=truth.orphans | set(truth.released)))
    for lid, what in truth.protected.items():
        if lid not in final.bookkeeper:
            c.violations.append(("end", Violation("1:protected-deleted", lid, f"{what} ledger deleted")))
    by_kind = judge_outcomes(c, ends)

    runs = truth.trim_runs
    aborted = [r for r in runs if r.result is not None and r.result.aborted]
    deleted = truth.created_bk - final.bookkeeper
    kind_of_payload = {x.payload: x.kind for x in truth.sent}
    # requests held by the age guard (a young ledger nothing proves superseded), by kind
    age_guarded = Counter(kind_of_payload.get(s.message.data, "?") for s, _ in c.settled
                          if s.outcome.value == "reconsumed" and "minLedgerAgeSeconds" in s.action.reason)
    figures = (
        f"seed={SEED} rounds={c.round + 1}/{ROUNDS} in {rounds_s:.0f}s "
        f"(+{time.monotonic() - started - rounds_s:.0f}s drain); "
        f"requests sent={len(truth.sent)} settled={sum(len(v) for v in ends.values())} "
        f"reconsumed={sum(1 for s, _ in c.settled if s.outcome.value == 'reconsumed')}; "
        f"ledgers created={len(truth.created_bk)} trimmed={len(truth.trimmed)} deleted={len(deleted)} "
        f"orphans={len(truth.orphans)} offloaded={len(truth.objects)}; "
        f"pending={dict(sorted(truth.pending_made.items()))} "
        f"released={dict(sorted(Counter(truth.released.values()).items()))} "
        f"dropped={len(truth.dropped)} forged-props={sum(1 for x in truth.sent if x.props)} "
        f"forged-labels={sum(1 for x in truth.sent if x.props and HELD_FOR in x.props)}; "
        f"age-guarded={sum(age_guarded.values())} {dict(sorted(age_guarded.items()))}; "
        f"trims={len(runs)} aborted={len(aborted)} "
        f"{dict(sorted((k, v) for k, v in stats.items() if k.startswith('trim:')))}; "
        f"resets={dict(truth.resets)}; observations={stats['observations']}; dlq={sum(dlq.values())} "
        f"(hidden from the listing: {sum(hidden.values())}); "
        f"seconds spent {', '.join(f'{k}={v:.0f}' for k, v in sorted({**c.spent, **c.checker.spent}.items()))}"
    )
    with capsys.disabled():
        print(f"safety interleaving: {figures}")
        print("outcomes by kind: " + ", ".join(f"{k}->{o}: {n}" for (k, o), n in sorted(by_kind.items())))
    if c.violations or c.errors:
        pytest.fail(failure_report(c, f"SAFETY_SEED={SEED}: {len(c.violations)} violation(s), {len(c.errors)} "
                                      f"harness error(s); {figures}"), pytrace=False)
    # The run exercised what it claims to: races that abort, requests that found their ledger listed.
    assert aborted, f"seed {SEED}: no trim was aborted by a cursor reset"
    assert by_kind[("trim-unwritten", "still_in_use")], f"seed {SEED}: no unwritten trim request ended in use"
    assert truth.trimmed and deleted >= truth.trimmed
    # ...and the pending shapes: the age guard held pending ledgers' requests, released ones were deleted
    assert sum(age_guarded[k] for k in ("pending", "pending-schema", "pending-compacted", "pending-bucket")), (
        f"seed {SEED}: no request for a pending ledger was held by the age guard")
    assert set(truth.released) & deleted, f"seed {SEED}: no released compacted or bucket ledger was deleted"


# ---------------------------------------------------------------- the checker catches what it must


@pytest.mark.parametrize("cluster", [0, GRACE_S], indirect=True, ids=["no-grace", "grace"])
def test_trim_racing_the_daemon_leaks_without_the_grace_and_the_checker_says_so(cluster: Cluster) -> None:
    """The race of trim and the daemon made deterministic: each of trim's sends waits until the real daemon
    has looked at its request, so every request finds its ledger still listed.  Without the grace
    the daemon acks them "in use", trim then removes them, and nobody will ever delete them: the
    checker must report each as a leak.  With the grace they are looked at again and deleted."""
    c = cluster
    topic = POOL[0]
    ledgers = [c.new_ledger(topic) for _ in range(3)]
    c.write_ledgers(topic, [LedgerInfo(lid, ENTRIES, 1024, now_ms()) for lid in ledgers])
    c.writer.cursor(topic, "sub", Position(ledgers[-1], 0))
    c.publisher.prepare(*c.topics.partition_topics)
    c.daemon.start()
    assert c.daemon.worker is not None
    c.daemon.worker.hooks.on_settled = lambda s: c.settled.append((s, time.time()))

    def seen(payload: bytes, terminal: bool) -> bool:
        return any(s.message.data == payload and (not terminal or s.outcome.value != "reconsumed")
                   for s, _ in list(c.settled))

    def send_and_wait_for_the_daemon(request: PendingDeleteLedgerInfo) -> str:
        message_id = c.send_request(request, "trim", 0)
        wait_until(lambda: seen(request.to_json(), terminal=False), 30, "the daemon to look at the request")
        return message_id

    result = trim(c.admin, topic, one_at_a_time(send_and_wait_for_the_daemon), offline=True)
    assert result.removed == ledgers[:2]
    c.truth.trimmed |= set(result.removed)
    wait_until(lambda: all(seen(s.payload, terminal=True) for s in c.truth.sent), 30, "every request to settle")
    leaks = c.checker.no_leak(c.checker.snapshot(), c.truth.trimmed)
    outcomes = sorted(s.outcome.value for s, _ in c.settled if s.outcome.value != "reconsumed")
    if c.daemon.service.config.two_phase_deletion_in_use_grace_seconds == 0:
        assert outcomes == ["still_in_use"] * 2
        assert [(v.invariant, v.ledger_id) for v in leaks] == [("2:leak", lid) for lid in ledgers[:2]]
    else:
        assert outcomes == ["deleted"] * 2
        assert leaks == []

#
# A checker that never fails proves nothing: each test below breaks one invariant behind the
# product's back (deleting a znode or an object directly, editing a list without a trim) and
# asserts the checker names that ledger and that invariant.

SOUND = "persistent://u/ns/sound"
LEDGER_BACKED = "persistent://u/ns/ledger-backed"
LONG_ID = 2**31 + 5  # past the short form: /ledgers/000/0000/0021/4748/L3653


@dataclass
class Small:
    checker: SafetyChecker
    bk: MetadataStore
    writer: ClusterWriter
    objects: set[str]
    offloaded: dict[int, tuple[str, str]]


@pytest.fixture
def small(zk_url: str, zookeeper: ZooKeeperServer) -> Iterator[Small]:
    """A sound little cluster with every kind of reference: listed (one offloaded, one long-form id),
    compacted, schema, cursor ledger, delayed-delivery bucket, and compacted ledgers hidden behind a
    ``__compaction`` cursor that keeps its state in a cursor ledger (the one it names and an older one).
    Ledger 41 is a bucket whose property was merged away and 13 a superseded compacted ledger: neither is
    referenced."""
    store, bk = open_store(zk_url), open_store(f"{zookeeper.url}/bk-{uuid.uuid4().hex[:8]}")
    w = ClusterWriter(store, bk)
    w.ensure_layout()
    for lid in (1, 2, 3, LONG_ID):
        w.bk_ledger(lid, pulsar_custom_metadata(SOUND))
    ctx = OffloadContext(uid_msb=-7, uid_lsb=9, complete=True, bookkeeper_deleted=False, driver_name="aws-s3")
    w.managed_ledger(SOUND, [LedgerInfo(1, ENTRIES, 1, offload_context=ctx), LedgerInfo(2), LedgerInfo(3),
                             LedgerInfo(LONG_ID)])
    w.cursor(SOUND, "sub", Position(2, 0))
    w.bk_ledger(10, {"application": "pulsar", "component": "compacted-ledger"})
    w.cursor(SOUND, "__compaction", Position(2, 0), properties={"CompactedTopicLedger": 10})
    w.bk_ledger(20, schema_custom_metadata(SOUND))
    w.schema(SOUND, [20])
    w.bk_ledger(30, pulsar_custom_metadata(LEDGER_BACKED, "durable"))
    w.bk_ledger(31, pulsar_custom_metadata(LEDGER_BACKED))
    w.managed_ledger(LEDGER_BACKED, [31])
    w.cursor(LEDGER_BACKED, "durable", Position(31, 0), cursors_ledger_id=30)
    w.bk_ledger(40, bucket_custom_metadata(SOUND, "sub"))
    w.bk_ledger(41, bucket_custom_metadata(SOUND, "sub"))
    w.cursor(SOUND, "sub", Position(2, 0), cursor_properties={f"{BUCKET_PREFIX}1_3": "40", "unrelated": "41"})
    w.bk_ledger(13, compacted_custom_metadata(SOUND))  # superseded by 10: nothing references it
    for lid in (11, 12):
        w.bk_ledger(lid, compacted_custom_metadata(LEDGER_BACKED))
    w.bk_ledger(32, pulsar_custom_metadata(LEDGER_BACKED, "__compaction"))
    w.cursor(LEDGER_BACKED, "__compaction", Position(31, 0), cursors_ledger_id=32,
             properties={"CompactedTopicLedger": 12})
    objects = {"8f000000-0000-0000-0000-000000000000-ledger-1"}  # unrelated: must be ignored
    offloaded = {1: offloaded_keys_upstream(1, -7, 9)}
    objects |= set(offloaded[1])
    checker = SafetyChecker(store, bk, list_objects=lambda: set(objects))
    yield Small(checker, bk, w, objects, offloaded)
    checker.close()
    store.close()
    bk.close()


def offloaded_keys_upstream(ledger_id: int, msb: int, lsb: int) -> tuple[str, str]:
    """The product's own naming (offloaders), to show the checker's independent naming agrees."""
    u = java_uuid(msb, lsb)
    return (f"{u}-ledger-{ledger_id}", f"{u}-ledger-{ledger_id}-index")


ALL = {1, 2, 3, LONG_ID, 10, 11, 12, 20, 30, 31, 32, 40}
UNREFERENCED = {13, 41}


def test_checker_reads_every_reference_and_finds_a_sound_cluster_sound(small: Small) -> None:
    snap = small.checker.snapshot()
    assert snap.bookkeeper == ALL | UNREFERENCED  # both hierarchical path forms found by listing
    assert set(snap.references) == ALL
    assert any("compacted" in r for r in snap.references[10]) and any("schema" in r for r in snap.references[20])
    assert any("cursor ledger" in r for r in snap.references[30])
    assert any("delayed-delivery bucket" in r for r in snap.references[40])
    assert all(any("keeps its state in a cursor ledger" in r for r in snap.references[lid]) for lid in (11, 12))
    assert snap.offload_keys == small.offloaded
    assert small.checker.referenced_present(snap, ALL, small.objects) == []
    assert small.checker.deleted_only_what_left(snap, ALL, set(), set(), small.offloaded) == []
    assert small.checker.trim_reports_match(snap, {1, 2, 3, LONG_ID, 31}, set()) == []
    assert small.checker.deleted_only_what_left(snap, ALL | UNREFERENCED, set(), set()) == []


@pytest.mark.parametrize("victim", [2, LONG_ID, 10, 20, 30, 40, 11, 12],
                         ids=["listed", "long-id", "compacted", "schema", "cursor-ledger", "bucket",
                              "hidden-compacted-older", "hidden-compacted-named"])
def test_checker_reports_a_referenced_ledger_deleted_behind_its_back(small: Small, victim: int) -> None:
    small.checker.snapshot()  # the checker learns each ledger's kind the first time it sees it listed
    small.bk.delete(_bk_path(victim), -2)
    snap = small.checker.snapshot()
    [v] = small.checker.referenced_present(snap, ALL, small.objects)
    assert (v.invariant, v.ledger_id) == ("1:referenced-ledger-deleted", victim)
    [strong] = small.checker.deleted_only_what_left(snap, ALL, set(), set())
    assert (strong.invariant, strong.ledger_id) == ("1:deleted-but-never-trimmed", victim)
    # ...and a ledger deleted before it was known to exist is not judged by the live form
    assert small.checker.referenced_present(snap, ALL - {victim}, small.objects) == []


def test_checker_allows_unreferenced_buckets_and_compacted_ledgers_to_go_and_reads_bad_bucket_properties(
        small: Small) -> None:
    for lid in UNREFERENCED:
        small.bk.delete(_bk_path(lid), -2)
    snap = small.checker.snapshot()
    assert small.checker.referenced_present(snap, ALL | UNREFERENCED, small.objects) == []
    assert small.checker.deleted_only_what_left(snap, ALL | UNREFERENCED, set(), UNREFERENCED) == []
    # a bucket property that names no ledger hides what it references: reported, never read as "none"
    small.writer.cursor(SOUND, "sub", Position(2, 0), cursor_properties={f"{BUCKET_PREFIX}1_3": "forty"})
    [v] = small.checker.referenced_present(small.checker.snapshot(), ALL, small.objects)
    assert v.invariant == "metadata-unreadable" and "names no ledger" in v.detail


def test_checker_reports_an_offloaded_copy_deleted_while_listed(small: Small) -> None:
    small.objects.discard(small.offloaded[1][1])
    snap = small.checker.snapshot()
    [v] = small.checker.referenced_present(snap, ALL, set(small.offloaded[1]))
    assert (v.invariant, v.ledger_id) == ("1:referenced-offload-deleted", 1)
    [strong] = small.checker.deleted_only_what_left(snap, ALL, set(), set(), small.offloaded)
    assert (strong.invariant, strong.ledger_id) == ("1:offload-deleted-but-never-trimmed", 1)


def test_checker_reports_leaks_and_trim_reports_that_do_not_match(small: Small) -> None:
    small.writer.managed_ledger(SOUND, [LedgerInfo(2), LedgerInfo(3), LedgerInfo(LONG_ID)])  # 1 left its list
    snap = small.checker.snapshot()
    ever = {1, 2, 3, LONG_ID, 31}
    assert [(v.invariant, v.ledger_id) for v in small.checker.trim_reports_match(snap, ever, set())] == [
        ("trim-report", 1)]
    assert [(v.invariant, v.ledger_id) for v in small.checker.trim_reports_match(snap, ever, {1, 3})] == [
        ("trim-report", 3)]
    leaks = small.checker.no_leak(snap, {1}, small.offloaded)
    assert [(v.invariant, v.ledger_id) for v in leaks] == [("2:leak", 1), ("2:offload-leak", 1)]
    small.bk.delete(_bk_path(1), -2)
    small.objects.difference_update(small.offloaded[1])
    snap = small.checker.snapshot()
    assert small.checker.no_leak(snap, {1}, small.offloaded) == []
    assert small.checker.deleted_only_what_left(snap, ALL, {1}, set(), small.offloaded) == []
    assert small.checker.referenced_present(snap, ALL, small.objects) == []


def _bk_path(lid: int) -> str:
    return ledger_path("/ledgers", lid, LedgerLayout.HIERARCHICAL)
