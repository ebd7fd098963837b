"""The kill soak's cluster: real servers, the state a broker would write, and the independent judge.

Why a separate world from ``test_trim_daemon_and_resets``: there the product runs in
threads of the test; here every product process is the real CLI, started and
SIGKILLed by ``tests/support/soak/run.py``.  This module is everything the
soak does *itself*, as the rest of a cluster would:

- **Servers**: ZooKeeper (metadata in one chroot, BookKeeper's ledger tree in
  another, as on a cluster) and ``moto_server`` for offloaded copies, on
  loopback ports, stopped by PID.
- **The broker's writes** (``grow``): new ledgers appended to managed-ledger
  nodes, cursors moved forward, older ledgers offloaded (objects uploaded,
  then the offload context written).  Every write is a CAS on the version it
  read, exactly as a broker's: a blind write could re-list a ledger trim had
  removed, and the judge would then blame the daemon for the test's own bug.
- **Ground truth** (``Truth``): what was created, ever listed, offloaded, made
  an orphan on purpose.  Only ever *added to*; the judge compares it with what
  the stores hold.
- **The judge** (:class:`tests.support.safety_checker.SafetyChecker`): reads ZooKeeper
  and the bucket itself, never the daemon's view.  Ledgers only leave lists
  (the broker here only appends), so "left metadata" is exactly "ever listed,
  not listed now".
"""

from __future__ import annotations

import functools
import os
import random
import threading
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

import boto3

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata, schema_custom_metadata
from metastore import MetadataStore, open_store
from metastore.formats import (
    LedgerInfo,
    ManagedLedgerInfo,
    OffloadContext,
    Position,
    cursor_path,
    decode_cursor,
    decode_managed_ledger,
    encode_cursor,
    encode_managed_ledger,
    managed_ledger_path,
)
from metastore.interface import BadVersionError
from tests.support.deletion_world import S3Bucket, now_ms
from tests.support.harness import MotoS3Server, ZooKeeperServer
from tests.support.safety_checker import SafetyChecker, Violation

for _key, _value in (("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test"),
                     ("AWS_DEFAULT_REGION", "us-east-1")):
    os.environ.setdefault(_key, _value)  # moto accepts any; boto3 refuses to sign without

ENTRIES = 10  # every ledger the soak writes has entries 0..9
SUBS = ("sub-a", "sub-b")
TENANT_NS = "persistent://soak/ns"


@dataclass
class Bucket(S3Bucket):
    """``S3Bucket`` with one boto3 client (it makes a new one per call: slow for a long soak)."""

    @functools.cached_property
    def client(self):  # noqa: ANN201 - boto3's client type is generated at run time
        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1")

    def delete_keys(self, keys: list[str]) -> None:
        for key in keys:
            self.client.delete_object(Bucket=self.name, Key=key)


@dataclass
class Truth:
    """What the soak did to the stores, recorded right after each write succeeded."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    created_bk: set[int] = field(default_factory=set)
    ever_listed: set[int] = field(default_factory=set)
    objects: dict[int, tuple[str, ...]] = field(default_factory=dict)  # offloaded ledger -> its keys
    orphans: set[int] = field(default_factory=set)  # created unlisted, and an orphan request receipted
    protected: dict[int, str] = field(default_factory=dict)  # schema ledgers: never trimmed, never deleted
    next_id: int = 1000

    def take_id(self) -> int:
        with self.lock:
            self.next_id += 1
            return self.next_id

    def known(self) -> tuple[set[int], set[str]]:
        with self.lock:
            return set(self.created_bk), {k for keys in self.objects.values() for k in keys}


@dataclass
class Servers:
    """ZooKeeper and moto_server under ``root``; the URLs every CLI call of the soak is given."""

    root: Path
    zookeeper: ZooKeeperServer | None = None
    s3: MotoS3Server | None = None
    chroot: str = field(default_factory=lambda: f"soak-{uuid.uuid4().hex[:8]}")

    def start(self) -> Servers:
        self.zookeeper = ZooKeeperServer(self.root / "zookeeper").start()
        self.s3 = MotoS3Server(self.root / "moto").start()
        return self

    @property
    def metadata_url(self) -> str:
        assert self.zookeeper is not None
        return f"{self.zookeeper.url}/{self.chroot}"

    @property
    def bookkeeper_url(self) -> str:
        assert self.zookeeper is not None
        return f"{self.zookeeper.url}/{self.chroot}-bk"

    def pids(self) -> list[int]:
        return [s.pid for s in (self.zookeeper, self.s3) if s is not None and s.proc is not None]

    def stop(self) -> None:
        for server in (self.s3, self.zookeeper):
            if server is not None:
                server.stop()


class ClusterState:
    """The broker's side of the cluster (writes) plus the judge's connections (reads), each its own."""

    def __init__(self, servers: Servers, topics: int, rng: random.Random) -> None:
        assert servers.s3 is not None
        self.rng = rng
        self.truth = Truth()
        self.topics = [f"{TENANT_NS}/topic-{i}" for i in range(topics)]
        self.stores: list[MetadataStore] = [open_store(u) for u in (servers.metadata_url, servers.bookkeeper_url,
                                                                      servers.metadata_url, servers.bookkeeper_url)]
        self.store, self.bk_store, check_store, check_bk = self.stores
        self.writer = ClusterWriter(self.store, self.bk_store)
        self.bucket = Bucket(servers.s3.endpoint, f"soak-{uuid.uuid4().hex[:8]}")
        self.bucket.client.create_bucket(Bucket=self.bucket.name)
        self.checker = SafetyChecker(check_store, check_bk, list_objects=self.bucket.keys)
        self.grow_conflicts = 0

    def close(self) -> None:
        self.checker.close()
        for store in self.stores:
            store.close()

    # ---- building

    def new_ledger(self, topic: str, custom: dict[str, str] | None = None) -> int:
        lid = self.truth.take_id()
        self.writer.bk_ledger(lid, custom or pulsar_custom_metadata(topic), entries=ENTRIES)
        with self.truth.lock:
            self.truth.created_bk.add(lid)
        return lid

    def build(self, ledgers_per_topic: int = 4) -> None:
        """Every topic: a ledger list, two cursors part way in, and a schema (a reference trim never drops)."""
        self.writer.ensure_layout()
        for topic in self.topics:
            ids = [self.new_ledger(topic) for _ in range(ledgers_per_topic)]
            self.writer.managed_ledger(topic, [LedgerInfo(lid, ENTRIES, 1024, now_ms()) for lid in ids])
            with self.truth.lock:
                self.truth.ever_listed.update(ids)
            for sub in SUBS:
                self.writer.cursor(topic, sub, Position(ids[self.rng.randrange(len(ids) - 1)], ENTRIES - 1))
            schema = self.new_ledger(topic, schema_custom_metadata(topic))
            self.truth.protected[schema] = f"schema of {topic}"
            self.writer.schema(topic, [schema])

    # ---- what a broker does while the soak runs

    def listed(self, topic: str) -> tuple[ManagedLedgerInfo, int]:
        node = self.store.get(managed_ledger_path(topic))
        assert node is not None, topic
        return decode_managed_ledger(node.data), node.version

    def grow(self, topic: str) -> None:
        """One broker step on ``topic``: roll a ledger, maybe offload an older one, move a cursor on.
        A CAS that loses (trim or a reset wrote first) is simply skipped, as a broker would retry later."""
        lid = self.new_ledger(topic)
        self._cas_ledgers(topic, lambda ledgers: [*ledgers, LedgerInfo(lid, ENTRIES, 1024, now_ms())], [lid])
        if self.rng.random() < 0.35:
            self._offload_one(topic)
        self._advance_cursor(topic, self.rng.choice(SUBS))

    def _cas_ledgers(self, topic: str, change: object, added: list[int]) -> bool:
        ml, version = self.listed(topic)
        new = change(list(ml.ledgers))  # type: ignore[operator]
        if new is None:
            return False
        try:
            self.store.put(managed_ledger_path(topic), encode_managed_ledger(replace(ml, ledgers=new)), version)
        except BadVersionError:
            self.grow_conflicts += 1
            return False
        with self.truth.lock:
            self.truth.ever_listed.update(added)
        return True

    def _offload_one(self, topic: str) -> None:
        """Upload a listed ledger's objects, then record its offload context by CAS; a lost CAS
        deletes the upload (Pulsar's offloader cleans up a failed offload the same way)."""
        ml, _ = self.listed(topic)
        candidates = [lg for lg in ml.ledgers[:-1] if lg.offload_context is None]
        if not candidates:
            return
        target = self.rng.choice(candidates)
        msb, lsb = self.rng.randrange(-(2**63), 2**63), self.rng.randrange(-(2**63), 2**63)
        keys = tuple(self.bucket.offload_ledger(topic, target.ledger_id, msb, lsb))
        ctx = OffloadContext(uid_msb=msb, uid_lsb=lsb, complete=True, bookkeeper_deleted=False, timestamp=now_ms(),
                             driver_name="aws-s3", driver_metadata={
                                 "bucket": self.bucket.name, "region": "us-east-1",
                                 "serviceEndpoint": self.bucket.endpoint})

        def with_context(ledgers: list[LedgerInfo]) -> list[LedgerInfo] | None:
            for i, lg in enumerate(ledgers):
                if lg.ledger_id == target.ledger_id and lg.offload_context is None:
                    ledgers[i] = replace(lg, offload_context=ctx)
                    return ledgers
            return None  # trimmed (or offloaded) since read

        if self._cas_ledgers(topic, with_context, []):
            with self.truth.lock:
                self.truth.objects[target.ledger_id] = keys
        else:
            self.bucket.delete_keys(list(keys))

    def _advance_cursor(self, topic: str, sub: str) -> None:
        """Consume on: the mark-delete moves to the end of a later listed ledger (never into a
        ledger at or below where it was, which trim may already have removed)."""
        ml, _ = self.listed(topic)
        path = cursor_path(topic, sub)
        node = self.store.get(path)
        if node is None:
            return
        info = decode_cursor(node.data)
        ahead = [lg.ledger_id for lg in ml.ledgers[:-1]
                 if info.mark_delete is None or lg.ledger_id > info.mark_delete.ledger_id]
        if not ahead:
            return
        moved = replace(info, mark_delete=Position(self.rng.choice(ahead[-2:]), ENTRIES - 1), last_active=now_ms())
        try:
            self.store.put(path, encode_cursor(moved), node.version)
        except BadVersionError:
            self.grow_conflicts += 1

    def orphan(self, topic: str) -> int:
        """A ledger the broker created and never listed (a crashed roll-over); the soak enqueues an orphan request."""
        return self.new_ledger(topic)

    # ---- judging

    def observe(self) -> list[Violation]:
        """Invariant 1 at a live moment: referenced ledgers and their listed objects exist."""
        known_bk, known_objects = self.truth.known()  # before the snapshot: see safety_checker's docstring
        snap = self.checker.snapshot()
        return SafetyChecker.referenced_present(snap, known_bk, known_objects)

    def final_verdict(self) -> tuple[list[Violation], list[Violation], dict[str, int]]:
        """(wrongly deleted, orphans left, figures) once nothing runs: the strong forms of both invariants."""
        known_bk, known_objects = self.truth.known()
        snap = self.checker.snapshot()
        with self.truth.lock:
            left = self.truth.ever_listed - snap.listed_ids()
            objects = dict(self.truth.objects)
            orphans = set(self.truth.orphans)
        wrong = SafetyChecker.referenced_present(snap, known_bk, known_objects)
        wrong += SafetyChecker.deleted_only_what_left(snap, known_bk, left, orphans, objects)
        leaks = SafetyChecker.no_leak(snap, left, objects, also_deleted=orphans)
        gone_bk = known_bk - snap.bookkeeper
        gone_objects = {lid for lid, keys in objects.items() if not set(keys) & snap.objects}
        figures = {"ledgersCreated": len(known_bk), "leftMetadata": len(left), "deletedBookKeeper": len(gone_bk),
                   "deletedOffloaded": len(gone_objects), "deleted": len(gone_bk | gone_objects),
                   "stillListed": len(snap.listed_ids()), "orphansCreated": len(orphans),
                   "offloaded": len(objects)}
        return wrong, leaks, figures
