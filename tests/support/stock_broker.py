"""A stand-in for a stock Pulsar broker, which deletes in one phase: it writes its metadata first, then
deletes the ledger (or the offloaded objects) from storage, and that second step may fail, leaving a
copy nothing names.  It writes real nodes to the metadata store and real objects to an S3 bucket, as
a broker's managed ledger, cursors, schema registry, compactor and delayed-delivery tracker do.

Every copy it removes from its metadata is recorded as ``deleted_by_broker`` (its storage delete
worked: it must never be requested) or ``leaked`` (failed: the leak watcher must get it deleted).
What its metadata still references at any moment is live.

Nothing it references leaves sooner than ``min_life_s`` after it appeared: a copy that lives less
than one pass of the leak watcher is never seen by it (the scheduled scan's to find, as the docs
say), and a broker's ledgers live for minutes.  An operation that would remove a younger copy is
skipped.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

from deletion_service.cluster_writer import (
    ClusterWriter,
    bucket_custom_metadata,
    compacted_custom_metadata,
    pulsar_custom_metadata,
    schema_custom_metadata,
)
from deletion_service.protocol.references import COMPACTED_LEDGER_PROPERTY, COMPACTION_CURSOR, DELAYED_BUCKET_PREFIX
from metastore.formats import LedgerInfo, OffloadContext, Position
from metastore.formats.pulsar_paths import cursor_path, managed_ledger_path, schema_path
from metastore.interface import MetadataStore
from offloaders.interface import java_uuid
from tests.support.deletion_world import S3Bucket

SUB = "sub"
DELAYED = "delayed"
#: A copy: ("ledger", id) in BookKeeper, or ("offloaded", id, uuid) in the bucket.
Copy = tuple


@dataclass
class TopicState:
    listed: list[LedgerInfo] = field(default_factory=list)
    cursor_ledger: int = -1
    schema: list[int] = field(default_factory=list)
    compacted: int | None = None
    buckets: dict[str, int] = field(default_factory=dict)  # property key -> ledger id


@dataclass
class StockBroker:
    """One broker's topics in ``namespace``; every operation is one metadata write, then its storage
    deletes, each failing with probability ``fail_rate``."""

    store: MetadataStore
    bucket: S3Bucket
    namespace: str
    rng: random.Random
    fail_rate: float = 0.3
    min_life_s: float = 0.0
    next_id: int = 1_000
    topics: dict[str, TopicState] = field(default_factory=dict)
    leaked: set[Copy] = field(default_factory=set)
    leaked_at: dict[Copy, float] = field(default_factory=dict)  # time.monotonic() of each leak
    born: dict[Copy, float] = field(default_factory=dict)  # time.monotonic() each copy was first referenced
    deleted_by_broker: set[Copy] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.writer = ClusterWriter(self.store)
        self.writer.ensure_layout()

    # ---- storage

    def _new_ledger(self, custom: dict[str, str]) -> int:
        self.next_id += 1
        self.writer.bk_ledger(self.next_id, custom, ctime_ms=int(time.time() * 1000) - 3_600_000)
        self.born[("ledger", self.next_id)] = time.monotonic()
        return self.next_id

    def _old(self, *copies: Copy) -> bool:
        """Whether every one of ``copies`` has been referenced for at least ``min_life_s``."""
        now = time.monotonic()
        return all(now - self.born.get(c, now) >= self.min_life_s for c in copies)

    @staticmethod
    def _copies(info: LedgerInfo) -> list[Copy]:
        ctx = info.offload_context
        out: list[Copy] = []
        if ctx is None or not ctx.bookkeeper_deleted:
            out.append(("ledger", info.ledger_id))
        if ctx is not None:
            out.append(("offloaded", info.ledger_id, java_uuid(ctx.uid_msb, ctx.uid_lsb)))
        return out

    def _topic_copies(self, state: TopicState) -> list[Copy]:
        out = [c for info in state.listed for c in self._copies(info)]
        out += [("ledger", lid) for lid in [state.cursor_ledger, *state.schema, *state.buckets.values()]]
        return out + ([("ledger", state.compacted)] if state.compacted is not None else [])

    def _delete_ledger(self, ledger_id: int) -> None:
        """BookKeeper's delete, which fails now and then: the leak."""
        if self.rng.random() < self.fail_rate:
            self.leaked.add(("ledger", ledger_id))
            self.leaked_at[("ledger", ledger_id)] = time.monotonic()
        else:
            self.writer.delete_bk_ledger(ledger_id)
            self.deleted_by_broker.add(("ledger", ledger_id))

    def _delete_offloaded(self, info: LedgerInfo) -> None:
        ctx = info.offload_context
        assert ctx is not None
        uuid = java_uuid(ctx.uid_msb, ctx.uid_lsb)
        if self.rng.random() < self.fail_rate:
            self.leaked.add(("offloaded", info.ledger_id, uuid))
            self.leaked_at[("offloaded", info.ledger_id, uuid)] = time.monotonic()
        else:
            for key in (f"{uuid}-ledger-{info.ledger_id}", f"{uuid}-ledger-{info.ledger_id}-index"):
                self.bucket.client.delete_object(Bucket=self.bucket.name, Key=key)
            self.deleted_by_broker.add(("offloaded", info.ledger_id, uuid))

    # ---- metadata

    def _write(self, topic: str) -> None:
        state = self.topics[topic]
        self.writer.managed_ledger(topic, state.listed)
        self.writer.cursor(topic, SUB, Position(state.listed[0].ledger_id if state.listed else -1, 0),
                           cursors_ledger_id=state.cursor_ledger)
        props = {COMPACTED_LEDGER_PROPERTY: state.compacted} if state.compacted is not None else {}
        self.writer.cursor(topic, COMPACTION_CURSOR, Position(-1, -1), properties=props)
        self.writer.cursor(topic, DELAYED, Position(-1, -1),
                           cursor_properties={k: str(v) for k, v in state.buckets.items()})
        if state.schema:
            self.writer.schema(topic, state.schema)

    def create_topic(self, name: str, ledgers: int = 4) -> str:
        topic = f"persistent://{self.namespace}/{name}"
        with self.lock:
            state = TopicState()
            self.topics[topic] = state
            state.listed = [LedgerInfo(self._new_ledger(pulsar_custom_metadata(topic)), entries=10, size=1024)
                            for _ in range(ledgers)]
            state.cursor_ledger = self._new_ledger(pulsar_custom_metadata(topic, cursor=SUB))
            state.schema = [self._new_ledger(schema_custom_metadata(topic)) for _ in range(2)]
            state.compacted = self._new_ledger(compacted_custom_metadata(topic))
            state.buckets = {f"{DELAYED_BUCKET_PREFIX}{n}_{n + 9}": self._new_ledger(
                bucket_custom_metadata(topic, DELAYED)) for n in (0, 10)}
            self._write(topic)
        return topic

    # ---- what a broker does, each a metadata write and then its deletes

    def rollover(self, topic: str) -> None:
        with self.lock:
            state = self.topics[topic]
            state.listed.append(LedgerInfo(self._new_ledger(pulsar_custom_metadata(topic)), entries=10, size=1024))
            self.writer.managed_ledger(topic, state.listed)

    def trim(self, topic: str) -> None:
        """The oldest ledger leaves the list; then its BookKeeper copy (if any) and offloaded copy (if any) go."""
        with self.lock:
            state = self.topics[topic]
            if len(state.listed) < 2 or not self._old(*self._copies(state.listed[0])):
                return
            gone = state.listed.pop(0)
            self.writer.managed_ledger(topic, state.listed)
            ctx = gone.offload_context
            if ctx is None or not ctx.bookkeeper_deleted:
                self._delete_ledger(gone.ledger_id)
            if ctx is not None:
                self._delete_offloaded(gone)

    def offload(self, topic: str) -> None:
        """The oldest ledger not offloaded yet goes to the bucket; its BookKeeper copy is then deleted
        (the offloader's own delete: not a departure, the ledger stays listed)."""
        with self.lock:
            state = self.topics[topic]
            candidates = [i for i, info in enumerate(state.listed[:-1]) if info.offload_context is None]
            if not candidates:
                return
            i = candidates[0]
            info = state.listed[i]
            msb, lsb = self.rng.randrange(1, 2**62), self.rng.randrange(1, 2**62)
            self.bucket.offload_ledger(topic, info.ledger_id, msb, lsb)
            ctx = self.bucket.offload_context(msb, lsb)
            state.listed[i] = LedgerInfo(info.ledger_id, entries=10, size=1024, offload_context=OffloadContext(
                uid_msb=msb, uid_lsb=lsb, complete=True, bookkeeper_deleted=True, driver_name="aws-s3",
                driver_metadata=ctx["driverMetadata"]))
            self.writer.managed_ledger(topic, state.listed)
            self.born[("offloaded", info.ledger_id, java_uuid(msb, lsb))] = time.monotonic()
            self.writer.delete_bk_ledger(info.ledger_id)

    def switch_cursor_ledger(self, topic: str) -> None:
        with self.lock:
            state = self.topics[topic]
            if not self._old(("ledger", state.cursor_ledger)):
                return
            old, state.cursor_ledger = state.cursor_ledger, self._new_ledger(pulsar_custom_metadata(topic, cursor=SUB))
            self._write(topic)
            self._delete_ledger(old)

    def new_schema_version(self, topic: str) -> None:
        """A new version is added and the oldest one's ledger is dropped from the locator."""
        with self.lock:
            state = self.topics[topic]
            if not self._old(("ledger", state.schema[0])):
                return
            state.schema.append(self._new_ledger(schema_custom_metadata(topic)))
            old = state.schema.pop(0)
            self.writer.schema(topic, state.schema)
            self._delete_ledger(old)

    def compact(self, topic: str) -> None:
        with self.lock:
            state = self.topics[topic]
            if state.compacted is not None and not self._old(("ledger", state.compacted)):
                return
            old, state.compacted = state.compacted, self._new_ledger(compacted_custom_metadata(topic))
            self._write(topic)
            if old is not None:
                self._delete_ledger(old)

    def merge_buckets(self, topic: str) -> None:
        """Two bucket snapshots merge into one new ledger; the old two are deleted."""
        with self.lock:
            state = self.topics[topic]
            old = list(state.buckets.values())
            if not self._old(*[("ledger", lid) for lid in old]):
                return
            low = min(int(k[len(DELAYED_BUCKET_PREFIX):].split("_")[0]) for k in state.buckets) if state.buckets else 0
            state.buckets = {f"{DELAYED_BUCKET_PREFIX}{low}_{low + 99}": self._new_ledger(
                bucket_custom_metadata(topic, DELAYED))}
            self._write(topic)
            for ledger_id in old:
                self._delete_ledger(ledger_id)

    def move_cursor(self, topic: str) -> None:
        """A cursor reset or an ack moves the mark-delete position: a write, nothing leaves."""
        with self.lock:
            state = self.topics[topic]
            target = self.rng.choice(state.listed).ledger_id
            self.writer.cursor(topic, SUB, Position(target, self.rng.randrange(10)),
                               cursors_ledger_id=state.cursor_ledger)

    def delete_topic(self, topic: str) -> None:
        """Every node of the topic goes, then every copy it referenced."""
        with self.lock:
            if not self._old(*self._topic_copies(self.topics[topic])):
                return
            state = self.topics.pop(topic)
            for name in (SUB, COMPACTION_CURSOR, DELAYED):
                self._drop(cursor_path(topic, name))
            self._drop(schema_path(topic))
            self._drop(managed_ledger_path(topic))
            for info in state.listed:
                ctx = info.offload_context
                if ctx is None or not ctx.bookkeeper_deleted:
                    self._delete_ledger(info.ledger_id)
                if ctx is not None:
                    self._delete_offloaded(info)
            for ledger_id in [state.cursor_ledger, *state.schema, *state.buckets.values()]:
                self._delete_ledger(ledger_id)
            if state.compacted is not None:
                self._delete_ledger(state.compacted)

    def _drop(self, path: str) -> None:
        node = self.store.get(path)
        if node is not None:
            self.store.delete(path, node.version)

    # ---- the judge's view

    def live(self) -> set[Copy]:
        """Every copy the broker's metadata references now."""
        with self.lock:
            return {c for state in self.topics.values() for c in self._topic_copies(state)}
