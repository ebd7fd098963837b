"""Seed a ZooKeeper with BookKeeper ledger znodes and managed-ledger nodes, fast.

``ClusterWriter.bk_ledger`` writes one znode per synchronous round trip, which
is right for tests of a few ledgers and far too slow for the 100k a throughput
bench needs.  Here the same bytes (same encoders, same custom metadata) go in
ZooKeeper transactions of :data:`PER_TRANSACTION` creates with
:data:`TRANSACTIONS_IN_FLIGHT` commits outstanding: kazoo spends about 250 µs
of client CPU per *request*, so one request per 500 creates is what makes
seeding cheap, more than pipelining single creates ever could.

Parents are created once, before any ledger: the distinct parent paths first
(``ensure_path``), then creates that never need ``makepath``.  A ledger's bytes
do not depend on its id, so they are encoded once per topic.
"""

from __future__ import annotations

import posixpath
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager

from kazoo.client import KazooClient
from kazoo.interfaces import IAsyncResult

from deletion_service.cluster_writer import LAYOUT_TEXT, pulsar_custom_metadata
from metastore.formats import (
    LedgerInfo,
    LedgerLayout,
    LedgerMetadata,
    ManagedLedgerInfo,
    Segment,
    encode_ledger_metadata,
    encode_managed_ledger,
    ledger_path,
    managed_ledger_path,
)

#: Creates per ZooKeeper transaction: one request and one log write for all of them.
PER_TRANSACTION = 500
#: Transactions outstanding at once, so the server never waits for the client.
TRANSACTIONS_IN_FLIGHT = 8
#: How long one commit may take before seeding gives up.
COMMIT_TIMEOUT_S = 60.0
LAYOUT = LedgerLayout.HIERARCHICAL


@contextmanager
def connect(hosts: str, chroot: str) -> Iterator[KazooClient]:
    """A started kazoo client rooted at ``chroot`` (created if missing), stopped on exit.

    kazoo does not create its chroot, and creating under a missing one fails, so
    the chroot is made first: the same order the product's ZooKeeper store uses.
    """
    if chroot:
        bootstrap = KazooClient(hosts=hosts)
        bootstrap.start(timeout=10)
        try:
            bootstrap.ensure_path(chroot)
        finally:
            bootstrap.stop()
            bootstrap.close()
    client = KazooClient(hosts=f"{hosts}{chroot}")
    client.start(timeout=10)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def ledger_bytes(topic: str, ctime_ms: int) -> bytes:
    """The znode data ``ClusterWriter.bk_ledger`` writes for a CLOSED data ledger of ``topic``.

    Spelled with the same encoder and the same field values, so the daemon and
    the inventory cannot tell a seeded ledger from one the writer made.
    """
    meta = LedgerMetadata(
        quorum_size=2, ensemble_size=3, ack_quorum_size=2, state="CLOSED", length=1024, last_entry_id=9,
        segments=[Segment(0, ["bookie-1:3181", "bookie-2:3181", "bookie-3:3181"])], digest_type="CRC32C",
        password=b"", ctime=ctime_ms,
        custom_metadata={k: v.encode() for k, v in pulsar_custom_metadata(topic).items()},
    )
    return encode_ledger_metadata(meta)


def create_all(client: KazooClient, nodes: Iterable[tuple[str, bytes]]) -> None:
    """Create every ``(path, data)`` in pipelined transactions; raise on the first failure.

    A node that already exists fails its whole transaction: seeding is for
    fresh chroots, and a silent half-seed would skew every figure taken on it.
    """
    pending: deque[IAsyncResult] = deque()
    batch = client.transaction()
    size = 0
    for path, data in nodes:
        batch.create(path, data)
        size += 1
        if size == PER_TRANSACTION:
            pending.append(batch.commit_async())
            batch, size = client.transaction(), 0
            if len(pending) >= TRANSACTIONS_IN_FLIGHT:
                committed(pending.popleft())
    if size:
        pending.append(batch.commit_async())
    while pending:
        committed(pending.popleft())


def committed(result: IAsyncResult) -> list[object]:
    """Wait for one transaction; a failed operation inside it is raised, not returned."""
    outcomes = result.get(timeout=COMMIT_TIMEOUT_S)
    failed = [r for r in outcomes if isinstance(r, Exception)]
    if failed:
        raise RuntimeError(f"transaction failed: {failed[0]!r}")
    return outcomes


def ensure_parents(client: KazooClient, paths: Iterable[str]) -> None:
    """Create each distinct parent once, so the creates themselves need no ``makepath``."""
    for parent in sorted({posixpath.dirname(p) for p in paths}):
        client.ensure_path(parent)


def seed_ledgers(hosts: str, chroot: str, ledger_ids: Sequence[int], topic_of: Callable[[int], str],
                 ledgers_root: str = "/ledgers", ctime_ms: int | None = None) -> list[str]:
    """Create one CLOSED BookKeeper ledger znode per id, plus ``LAYOUT`` if missing; return the paths.

    Hierarchical layout and the bytes ``ClusterWriter.bk_ledger`` writes, with
    the custom metadata a broker stamps on a data ledger of ``topic_of(id)``.
    """
    ctime = int(time.time() * 1000) if ctime_ms is None else ctime_ms
    paths = [ledger_path(ledgers_root, lid, LAYOUT) for lid in ledger_ids]
    data_of: dict[str, bytes] = {}

    def data(lid: int) -> bytes:
        topic = topic_of(lid)
        if topic not in data_of:
            data_of[topic] = ledger_bytes(topic, ctime)
        return data_of[topic]

    with connect(hosts, chroot) as client:
        client.ensure_path(ledgers_root)
        layout = f"{ledgers_root}/LAYOUT"
        if client.exists(layout) is None:
            client.create(layout, LAYOUT_TEXT[LAYOUT].encode())
        ensure_parents(client, paths)
        create_all(client, ((path, data(lid)) for path, lid in zip(paths, ledger_ids, strict=True)))
    return paths


def seed_managed_ledgers(hosts: str, chroot: str, topics: Sequence[str],
                         ledgers_of: Callable[[str], Sequence[int]]) -> None:
    """One managed-ledger node per topic listing ``ledgers_of(topic)``, oldest first; no cursors.

    Each ledger is listed as ``ClusterWriter.managed_ledger`` lists a bare id
    (10 entries, 1024 bytes, written now), so trim and verification see the
    node a broker would have left.
    """
    now = int(time.time() * 1000)
    paths = [managed_ledger_path(topic) for topic in topics]

    def node(topic: str) -> bytes:
        infos = [LedgerInfo(lid, entries=10, size=1024, timestamp=now) for lid in ledgers_of(topic)]
        return encode_managed_ledger(ManagedLedgerInfo(infos, {}))

    with connect(hosts, chroot) as client:
        ensure_parents(client, paths)
        create_all(client, ((path, node(topic)) for path, topic in zip(paths, topics, strict=True)))
