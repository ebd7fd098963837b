"""What ZooKeeper itself allows for deleting ledger znodes, and Pulsar's pre-PIP-186 one-phase path.

    python -m bench.zk_limits [--ledgers 20000] [--json]

Three loops, each on its own fresh chroot seeded by :mod:`bench.seed` (seeding
is never timed), each deleting every seeded ledger znode:

* ``raw pipelined get+delete``: a bare kazoo loop, per window of ledgers all
  reads sent before waiting, then all deletes at the versions read.  This is
  the raw ZooKeeper rate the delete-phase daemon must beat by 1.5x:
  the daemon also verifies, so only batching lets it get there.
* ``raw multi delete``: the versions read first (untimed), then only the
  deletes, in transactions, a few commits outstanding: the ceiling batching
  can reach on this server.
* ``one-phase (pre-PIP-186)``: what a broker did before two-phase deletion:
  per topic, drop the ledgers from the managed-ledger node (one CAS write),
  then delete each ledger znode blind (version -1), no system topic, no checks.

Figures are printed, never asserted; tests check only that the znodes are gone.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.interfaces import IAsyncResult

from bench.seed import COMMIT_TIMEOUT_S, committed, connect, seed_ledgers, seed_managed_ledgers
from metastore.formats import decode_managed_ledger, encode_managed_ledger, managed_ledger_path
from tests.support.harness import ZooKeeperServer

#: How long one reply may take before a loop gives up (a bench must not hang).
REPLY_TIMEOUT_S = COMMIT_TIMEOUT_S
#: Deletes outstanding at once in the one-phase loop, as a BookKeeper client pipelines them.
ONE_PHASE_WINDOW = 1000


@dataclass(frozen=True)
class Rate:
    """How many ledgers one loop deleted, and in how long (the timed part only)."""

    name: str
    ledgers: int
    seconds: float

    @property
    def per_second(self) -> float:
        """Ledgers per second; 0 when nothing was timed (avoids a division error on an empty run)."""
        return self.ledgers / self.seconds if self.seconds > 0 else 0.0


def topic_name(i: int) -> str:
    """The bench's i-th topic."""
    return f"persistent://bench/ns/t{i}"


def fresh_chroot() -> str:
    """A chroot no other run uses, so every loop starts from exactly what it seeded."""
    return f"/limit-{uuid.uuid4().hex[:8]}"


def spread(n: int, topics: int) -> dict[str, list[int]]:
    """Ledger ids 1..n over ``topics`` topics, in contiguous runs (as a topic rolls its ledgers)."""
    out: dict[str, list[int]] = {}
    for t in range(topics):
        ids = list(range(t * n // topics + 1, (t + 1) * n // topics + 1))
        if ids:
            out[topic_name(t)] = ids
    return out


def windows(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    """Consecutive slices of ``size`` items."""
    for start in range(0, len(items), size):
        yield items[start:start + size]


def seed_one_topic(hosts: str, chroot: str, n: int) -> list[str]:
    """``n`` ledgers of one topic, for the loops that only delete znodes."""
    return seed_ledgers(hosts, chroot, range(1, n + 1), lambda _lid: topic_name(0))


def raw_pipelined_get_delete(hosts: str, n: int, window: int = 1000, *, chroot: str | None = None) -> Rate:
    """A bare kazoo loop: per window, all ``get_async`` sent, then all ``delete_async`` at the versions read.

    The read is there because no deleter may delete blind: the version read is
    the version deleted, as the daemon does.  This is the raw ZooKeeper rate the
    daemon must beat by 1.5x.  ``chroot`` defaults to a fresh one.
    """
    chroot = chroot or fresh_chroot()
    paths = seed_one_topic(hosts, chroot, n)
    deleted = 0
    with connect(hosts, chroot) as client:
        started = time.perf_counter()
        for chunk in windows(paths, window):
            reads = [client.get_async(p) for p in chunk]
            versions = [r.get(timeout=REPLY_TIMEOUT_S)[1].version for r in reads]
            deletes = [client.delete_async(p, version=v) for p, v in zip(chunk, versions, strict=True)]
            deleted += sum(1 for d in deletes if d.get(timeout=REPLY_TIMEOUT_S))
        elapsed = time.perf_counter() - started
    return Rate("raw pipelined get+delete", deleted, elapsed)


def raw_multi_delete(hosts: str, n: int, ops_per_multi: int = 100, in_flight: int = 4, *,
                     chroot: str | None = None) -> Rate:
    """Delete in transactions of ``ops_per_multi`` version-checked deletes, ``in_flight`` commits outstanding.

    Versions are read first (pipelined, untimed) because a blind delete is not
    what any safe deleter does; only the multi deletes are timed, so this is
    the most batching can buy.  ``chroot`` defaults to a fresh one.
    """
    chroot = chroot or fresh_chroot()
    paths = seed_one_topic(hosts, chroot, n)
    with connect(hosts, chroot) as client:
        reads = [client.get_async(p) for p in paths]  # all sent before the first wait
        versions = {p: r.get(timeout=REPLY_TIMEOUT_S)[1].version for p, r in zip(paths, reads, strict=True)}
        started = time.perf_counter()
        deleted = multi_delete(client, paths, versions, ops_per_multi, in_flight)
        elapsed = time.perf_counter() - started
    return Rate("raw multi delete", deleted, elapsed)


def multi_delete(client: KazooClient, paths: Sequence[str], versions: dict[str, int],
                 ops_per_multi: int, in_flight: int) -> int:
    """Commit the deletes, at most ``in_flight`` transactions outstanding; return how many succeeded."""
    pending: deque[IAsyncResult] = deque()
    deleted = 0
    for chunk in windows(paths, ops_per_multi):
        tx = client.transaction()
        for path in chunk:
            tx.delete(path, version=versions[path])
        pending.append(tx.commit_async())
        if len(pending) >= in_flight:
            deleted += len(committed(pending.popleft()))
    while pending:
        deleted += len(committed(pending.popleft()))
    return deleted


def one_phase_baseline(hosts: str, n: int, topics: int = 100, *, chroot: str | None = None) -> Rate:
    """Pulsar before PIP-186: per topic, forget the ledgers in one CAS write, then delete each znode blind.

    Seeds ``n`` ledgers over ``topics`` topics (each listed in its topic's
    managed-ledger node) untimed; times the whole per-topic loop: read the node,
    write it back without ledgers at the version read, then pipelined
    ``delete_async`` at version -1, as BookKeeper's client deletes a ledger.
    No system topic, no verification: the rate two-phase deletion is compared to.
    """
    chroot = chroot or fresh_chroot()
    by_topic = spread(n, topics)
    topic_of = {lid: topic for topic, ids in by_topic.items() for lid in ids}
    paths = seed_ledgers(hosts, chroot, range(1, n + 1), topic_of.__getitem__)
    seed_managed_ledgers(hosts, chroot, list(by_topic), by_topic.__getitem__)
    path_of = dict(zip(range(1, n + 1), paths, strict=True))
    deleted = 0
    with connect(hosts, chroot) as client:
        started = time.perf_counter()
        for topic, ids in by_topic.items():
            forget_ledgers(client, topic)
            for chunk in windows([path_of[lid] for lid in ids], ONE_PHASE_WINDOW):
                deletes = [client.delete_async(p, version=-1) for p in chunk]
                deleted += sum(1 for d in deletes if d.get(timeout=REPLY_TIMEOUT_S))
        elapsed = time.perf_counter() - started
    return Rate("one-phase (pre-PIP-186)", deleted, elapsed)


def forget_ledgers(client: KazooClient, topic: str) -> None:
    """Rewrite ``topic``'s managed-ledger node without its ledgers, at the version read (one CAS set)."""
    path = managed_ledger_path(topic)
    data, stat = client.get(path)
    info = decode_managed_ledger(data)
    client.set(path, encode_managed_ledger(replace(info, ledgers=[])), version=stat.version)


def run_all(hosts: str, ledgers: int) -> list[Rate]:
    """The three loops in order, each on its own chroot of the same server."""
    return [
        raw_pipelined_get_delete(hosts, ledgers),
        raw_multi_delete(hosts, ledgers),
        one_phase_baseline(hosts, ledgers),
    ]


def print_table(rates: Sequence[Rate]) -> None:
    """The figures, and the daemon's target (1.5x the raw pipelined rate)."""
    print(f"{'ZooKeeper deletes':<30}{'ledgers':>10}{'seconds':>10}{'ledgers/s':>12}")
    for rate in rates:
        print(f"{'  ' + rate.name:<30}{rate.ledgers:>10}{rate.seconds:>10.2f}{rate.per_second:>12.0f}")
    raw = next((r for r in rates if r.name == "raw pipelined get+delete"), None)
    if raw is not None:
        print(f"daemon target (1.5 x raw pipelined get+delete): {1.5 * raw.per_second:.0f} ledgers/s")


def main() -> None:
    """Start a throwaway ZooKeeper, run the three loops, print the figures (``--json``: one JSON object)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ledgers", type=int, default=20_000)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        zk = ZooKeeperServer(Path(tmp) / "zk").start()
        try:
            rates = run_all(zk.hosts, args.ledgers)
        finally:
            zk.stop()
    if args.json:
        print(json.dumps({"ledgers": args.ledgers,
                          "rates": [asdict(r) | {"per_second": r.per_second} for r in rates]}))
    else:
        print_table(rates)


if __name__ == "__main__":
    main()
