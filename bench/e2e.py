"""The daemon end to end, watched from outside: ``ledger-deletion run`` as its own process.

    python -m bench.e2e [--ledgers 20000] [--offloaded-every 2] [--rate 2000] [--json]

Real ZooKeeper, the embedded broker (pulsar-lite, as ``--data-dir`` starts it)
and an S3 server (moto).  Each run seeds ``--ledgers`` BookKeeper ledgers over
100 topics (none referenced), every ``--offloaded-every``-th of them also with
an offloaded copy (data + index objects) in S3, and one request per copy.

* ``drain``: every request queued first, then the daemon starts with
  ``--exit-when-idle``.  Throughput is timed from the first deletion to the last
  as seen in ZooKeeper (and S3 found empty), polled by this process.
* ``paced``: the daemon runs first; requests are sent at ``--rate`` per second.
  Latency is per ledger, from its request's receipt to its znode seen gone.

The daemon's peak RSS is its ``VmHWM`` (Linux), sampled until it exits.
Seeding and sending are not timed.  Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from kazoo.client import KazooClient

from bench.seed import seed_ledgers, seed_managed_ledgers
from bench.zk_limits import fresh_chroot, topic_name
from deletion_service.broker.publisher import RequestPublisher
from deletion_service.broker.pulsar_client import PulsarBrokerClient
from deletion_service.config import DeletionConfig
from deletion_service.embedded.broker import EmbeddedBroker, free_port, stop_pid
from deletion_service.protocol.request import PendingDeleteLedgerInfo
from deletion_service.protocol.topics import DeletionTopics
from deletion_service.testing.offload_objects import build_index_v1, pulsar_ledger_metadata
from metastore.formats import managed_ledger_name
from offloaders.interface import java_uuid
from tests.support.deletion_world import DAY_MS, UPSTREAM_META, S3Bucket
from tests.support.harness import MotoS3Server, ZooKeeperServer

TOPICS = 100
BUCKET = "bench-offload"
#: Requests per send_requests call while pacing: 20 sends a second at 2,000/s.
PACE_CHUNK = 100


@dataclass
class E2EResult:
    mode: str
    ledgers: int
    requests: int
    offloaded: int
    seconds: float  # first deletion to last (ZooKeeper, and S3 empty)
    ledgers_per_second: float
    requests_per_second: float
    p50_ms: float | None
    p99_ms: float | None
    peak_rss_mb: float
    exit_after_last_s: float  # how long the daemon took to notice it was idle (drain)
    left_in_zookeeper: int
    left_in_s3: int


@dataclass
class World:
    zk: ZooKeeperServer
    s3: MotoS3Server
    data_dir: Path

    @property
    def bucket(self) -> S3Bucket:
        return S3Bucket(self.s3.endpoint, BUCKET)


def request_for(lid: int, ctx: dict | None, marked_at_ms: int, topics: int = TOPICS) -> PendingDeleteLedgerInfo:
    return PendingDeleteLedgerInfo.model_validate({
        "topicName": topic_name(lid % topics), "ledgerComponent": "MANAGED_LEDGER",
        "ledgerType": "OFFLOAD_LEDGER" if ctx else "LEDGER", "ledgerId": lid,
        "offloadContext": ctx, "markedAt": marked_at_ms, "reason": "trim"})


def prepare(world: World, chroot: str, ledgers: int, offloaded_every: int, topics: int = TOPICS
            ) -> tuple[list[str], list[PendingDeleteLedgerInfo]]:
    """Seed ZooKeeper and S3; the requests, LEDGER and OFFLOAD_LEDGER interleaved per ledger."""
    ids = list(range(1, ledgers + 1))
    paths = seed_ledgers(world.zk.hosts, chroot, ids, lambda lid: topic_name(lid % topics))
    # Every topic lists one ledger nobody asks about: the requested ones are unreferenced.
    seed_managed_ledgers(world.zk.hosts, chroot, [topic_name(i) for i in range(topics)], lambda t: [ledgers + 1])
    bucket = world.bucket
    offloaded = [lid for lid in ids if offloaded_every and lid % offloaded_every == 0]
    seed_offloaded(bucket, offloaded)
    marked = int(time.time() * 1000) - 3_600_000  # past the in-use grace: none is referenced anyway
    requests, offloaded_ids = [], set(offloaded)
    for lid in ids:
        requests.append(request_for(lid, None, marked, topics))
        if lid in offloaded_ids:
            requests.append(request_for(lid, bucket.offload_context(lid, lid), marked, topics))
    return paths, requests


def seed_offloaded(bucket: S3Bucket, ids: Sequence[int]) -> None:
    """Each ledger's data and index objects, as Pulsar's offloader writes them (uuid from the id).

    One boto3 client for all: ``S3Bucket.client`` builds a new one per use, which made
    seeding CPU-bound in this process rather than in the S3 server."""
    client = bucket.client
    index_by_topic: dict[str, bytes] = {}

    def put(lid: int) -> None:
        topic = topic_name(lid % TOPICS)
        index = index_by_topic.get(topic) or index_by_topic.setdefault(topic, build_index_v1(pulsar_ledger_metadata(
            managed_ledger_name(topic), entries=10, size=1024, ctime_ms=int(time.time() * 1000) - 2 * DAY_MS)))
        name = f"{java_uuid(lid, lid)}-ledger-{lid}"
        client.put_object(Bucket=bucket.name, Key=name, Body=b"entries", Metadata=UPSTREAM_META)
        client.put_object(Bucket=bucket.name, Key=f"{name}-index", Body=index, Metadata=UPSTREAM_META)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, ids))


class Watcher(threading.Thread):
    """Polls the ledger znodes' parents and records when each path was first seen gone."""

    def __init__(self, hosts: str, chroot: str, paths: Sequence[str]) -> None:
        super().__init__(daemon=True)
        self.client = KazooClient(hosts=f"{hosts}{chroot}")
        self.parents: dict[str, set[str]] = {}
        for p in paths:
            parent, name = p.rsplit("/", 1)
            self.parents.setdefault(parent, set()).add(name)
        self.gone: dict[str, float] = {}
        self.total = len(paths)
        self.interval_s = max(0.05, len(paths) / 400_000)
        self.stop = threading.Event()

    def run(self) -> None:
        self.client.start(10)
        try:
            while not self.stop.is_set() and len(self.gone) < self.total:
                for parent, names in self.parents.items():
                    now = time.perf_counter()
                    present = set(self.client.get_children(parent))
                    for name in names - present:
                        self.gone.setdefault(f"{parent}/{name}", now)
                self.stop.wait(self.interval_s)
        finally:
            self.client.stop()
            self.client.close()


def peak_rss_mb(pid: int) -> float:
    """The daemon's peak RSS plus its delete process's (the Python child it spawns; its embedded broker,
    another child, is not the daemon's memory)."""
    return _own_peak_rss_mb(pid) + sum(_own_peak_rss_mb(child) for child in _python_children(pid))


def _own_peak_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _python_children(pid: int) -> list[int]:
    children = []  # a delete process restarted by another thread is listed under that thread's task
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children += (task / "children").read_text().split()
        except OSError:
            continue
    out = []
    for child in map(int, children):
        try:
            if b"ledger-deletion-delete-process" in Path(f"/proc/{child}/cmdline").read_bytes():
                out.append(child)
        except OSError:
            continue
    return out


def write_config(world: World, path: Path) -> Path:
    path.write_text(f'offloadAllowedBuckets = ["{BUCKET}"]\n')
    return path


def start_daemon(world: World, chroot: str, config: Path, exit_when_idle: bool, audit: bool = True,
                 profile: Path | None = None, delete_process: bool = True) -> subprocess.Popen:
    """``ledger-deletion run`` as its own process; ``audit`` False runs it through
    :mod:`bench.daemon_without_audit` (the same daemon, no trail), ``profile`` samples it (and its
    delete process) with py-spy, ``delete_process`` False sets ``ledgerDeletionDeleteProcess = off``
    (by default ``auto`` decides, as for an operator)."""
    port = free_port()
    entry = "deletion_service.cli.main" if audit else "bench.daemon_without_audit"
    spy = [str(Path(sys.executable).parent / "py-spy"), "record", "-r", "200", "-f", "raw", "--threads",
           "--subprocesses",
           "-o", str(profile), "--"] if profile is not None else []
    args = [*spy, sys.executable, "-m", entry, "run", "--data-dir", str(world.data_dir),
            "--metadata-store", f"{world.zk.url}{chroot}", "--config", str(config),
            "--admin-address", f"127.0.0.1:{port}"]
    if exit_when_idle:
        args += ["--exit-when-idle", "--max-wait", "900"]
    log = (world.data_dir / "daemon.log").open("a")  # a pipe nobody reads would fill and stall the daemon
    env = {**os.environ, **({} if delete_process else {"LEDGER_DELETION_LEDGER_DELETION_DELETE_PROCESS": "off"})}
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log, text=True, env=env)
    proc.admin_port = port  # type: ignore[attr-defined]
    return proc


def wait_ready(proc: subprocess.Popen, timeout_s: float = 60) -> None:
    url = f"http://127.0.0.1:{proc.admin_port}/readyz"  # type: ignore[attr-defined]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"bench: the daemon did not become ready (exit {proc.poll()})")


def publisher(world: World) -> tuple[RequestPublisher, PulsarBrokerClient]:
    embedded = EmbeddedBroker(world.data_dir)
    client = PulsarBrokerClient(embedded.ensure().serviceUrl, subscription_known=embedded.subscription_known)
    topics = DeletionTopics.from_config(DeletionConfig())
    pub = RequestPublisher(client, topics)
    pub.prepare(*topics.partition_topics, topics.retry)
    return pub, client


def run_e2e(world: World, ledgers: int, offloaded_every: int, rate: float | None = None, *, topics: int = TOPICS,
            audit: bool = True, profile: Path | None = None, delete_process: bool = True) -> E2EResult:
    """One run on a fresh chroot: ``rate`` None drains a queue, else requests are paced.  ``topics``:
    how many topics the ledgers are spread over; ``audit``/``profile``/``delete_process``: see
    :func:`start_daemon`."""
    chroot = fresh_chroot()
    _say(f"seeding {ledgers} ledgers ({'drain' if rate is None else f'paced {rate:g}/s'})")
    paths, requests = prepare(world, chroot, ledgers, offloaded_every, topics)
    _say(f"{len(requests)} requests")
    config = write_config(world, world.data_dir / "bench.toml")
    watcher = Watcher(world.zk.hosts, chroot, paths)
    sent_at: dict[int, float] = {}
    if rate is None:
        # Queued first; the daemon then starts its own broker on the same data (``run`` replaces
        # a running embedded broker), which keeps the messages.
        pub, client = publisher(world)
        try:
            send_all(pub, requests, sent_at)
        finally:
            pub.close()
            client.close()
        proc = start_daemon(world, chroot, config, exit_when_idle=True, audit=audit, profile=profile,
                            delete_process=delete_process)
        watcher.start()
    else:
        proc = start_daemon(world, chroot, config, exit_when_idle=False)
        wait_ready(proc)
        pub, client = publisher(world)  # the daemon's broker, reused
        watcher.start()
        try:
            send_paced(pub, requests, sent_at, rate)
        finally:
            pub.close()
            client.close()
    try:
        rss, s3_empty_at, exited_at = wait_done(world, proc, watcher, exit_when_idle=rate is None)
    finally:
        if proc.poll() is None:  # the bench failed: never leave the daemon running
            proc.kill()
            proc.wait(10)
    return summarize(world, "drain" if rate is None else f"paced {rate:g}/s", paths, requests, watcher, sent_at,
                     rss, s3_empty_at, exited_at)


def _say(what: str) -> None:
    print(f"bench.e2e: {what}", file=sys.stderr, flush=True)


def send_all(pub: RequestPublisher, requests: Sequence[PendingDeleteLedgerInfo], sent_at: dict[int, float]) -> None:
    for i in range(0, len(requests), 1000):
        chunk = requests[i:i + 1000]
        failed = [r for r in pub.send_requests(chunk) if isinstance(r, Exception)]
        if failed:
            raise SystemExit(f"bench: {len(failed)} request(s) not sent: {failed[0]}")
        now = time.perf_counter()
        for r in chunk:
            sent_at.setdefault(r.ledger_id, now)


def send_paced(pub: RequestPublisher, requests: Sequence[PendingDeleteLedgerInfo], sent_at: dict[int, float],
               rate: float) -> None:
    start = time.perf_counter()
    for i in range(0, len(requests), PACE_CHUNK):
        due = start + i / rate
        time.sleep(max(0.0, due - time.perf_counter()))
        send_all(pub, requests[i:i + PACE_CHUNK], sent_at)


def wait_done(world: World, proc: subprocess.Popen, watcher: Watcher, exit_when_idle: bool
              ) -> tuple[float, float, float]:
    """Peak RSS while it runs, when S3 was first seen empty, and when the daemon exited."""
    rss, s3_empty_at = 0.0, 0.0
    bucket = world.bucket
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        rss = max(rss, peak_rss_mb(proc.pid))
        if not s3_empty_at and len(watcher.gone) == watcher.total and not bucket.keys():
            s3_empty_at = time.perf_counter()
            if not exit_when_idle:
                proc.send_signal(signal.SIGTERM)
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    else:
        proc.kill()
    exited_at = time.perf_counter()
    watcher.stop.set()
    watcher.join(30)
    if proc.returncode not in (0, -signal.SIGTERM):
        tail = (world.data_dir / "daemon.log").read_text()[-2000:]
        print(f"bench: daemon exited {proc.returncode}: {tail}", file=sys.stderr)
    return rss, s3_empty_at or exited_at, exited_at


def summarize(world: World, mode: str, paths: Sequence[str], requests: Sequence[PendingDeleteLedgerInfo],
              watcher: Watcher, sent_at: dict[int, float], rss: float, s3_empty_at: float,
              exited_at: float) -> E2EResult:
    gone = watcher.gone
    first, last = min(gone.values(), default=0.0), max(gone.values(), default=0.0)
    end = max(last, s3_empty_at)
    seconds = max(end - first, 1e-9)
    latencies = sorted((gone[p] - sent_at[lid]) * 1000 for lid, p in zip(range(1, len(paths) + 1), paths,
                                                                          strict=True) if p in gone)
    p50 = statistics.median(latencies) if latencies else None
    p99 = latencies[int(len(latencies) * 0.99) - 1] if latencies else None
    offloaded = sum(1 for r in requests if r.offload_context is not None)
    return E2EResult(mode, len(paths), len(requests), offloaded, round(seconds, 2),
                     round(len(paths) / seconds), round(len(requests) / seconds),
                     None if p50 is None else round(p50, 1), None if p99 is None else round(p99, 1),
                     round(rss, 1), round(exited_at - end, 2),
                     watcher.total - len(gone), len(world.bucket.keys()))


def raw_s3_calls(world: World, objects: int = 400, threads: int = 4) -> dict:
    """What the S3 server allows: HEAD, GET and DELETE of ``objects`` objects, ``threads`` at a
    time (the daemon's offload concurrency), bare boto3; puts not timed.  Calls per second."""
    client = world.bucket.client
    keys = [f"raw-{i}" for i in range(objects)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: client.put_object(Bucket=BUCKET, Key=k, Body=b"x" * 300), keys))

    def three(key: str) -> None:
        client.head_object(Bucket=BUCKET, Key=key)
        client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        client.delete_object(Bucket=BUCKET, Key=key)

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(three, keys))
    seconds = time.perf_counter() - started
    return {"calls": 3 * objects, "seconds": round(seconds, 2), "callsPerSecond": round(3 * objects / seconds)}


def print_table(results: Sequence[E2EResult]) -> None:
    print(f"{'end to end (daemon process)':<22}{'ledgers':>8}{'requests':>9}{'seconds':>9}{'ledgers/s':>10}"
          f"{'requests/s':>11}{'p50 ms':>8}{'p99 ms':>8}{'RSS MB':>8}{'exit s':>7}")
    for r in results:
        print(f"  {r.mode:<20}{r.ledgers:>8}{r.requests:>9}{r.seconds:>9.2f}{r.ledgers_per_second:>10}"
              f"{r.requests_per_second:>11}{_ms(r.p50_ms):>8}{_ms(r.p99_ms):>8}{r.peak_rss_mb:>8.0f}"
              f"{r.exit_after_last_s:>7.1f}")
        if r.left_in_zookeeper or r.left_in_s3:
            print(f"    NOT DONE: {r.left_in_zookeeper} znode(s), {r.left_in_s3} object(s) left")


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


class Servers:
    """ZooKeeper, moto and the embedded broker of a temporary data dir, stopped by PID on exit."""

    def __enter__(self) -> World:
        self._tmp = tempfile.TemporaryDirectory()
        root = Path(self._tmp.name)
        self.zk = ZooKeeperServer(root / "zk").start()
        self.s3 = MotoS3Server(root / "s3").start()
        self.world = World(self.zk, self.s3, root / "data")
        self.world.data_dir.mkdir()
        S3Bucket(self.s3.endpoint, BUCKET).client.create_bucket(Bucket=BUCKET)
        return self.world

    def __exit__(self, *exc: object) -> None:
        try:
            embedded = EmbeddedBroker(self.world.data_dir)  # whichever broker of our data dir runs last
            info = embedded.read_info()
            if info is not None and embedded.is_ours_and_alive(info):
                stop_pid(info.pid)
        finally:
            self.s3.stop()
            self.zk.stop()
            self._tmp.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ledgers", type=int, default=20_000)
    parser.add_argument("--offloaded-every", type=int, default=2, help="every Nth ledger also offloaded (0: none)")
    parser.add_argument("--rate", type=float, default=2000, help="paced run: requests per second (0: skip)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    with Servers() as world:
        results = [run_e2e(world, args.ledgers, args.offloaded_every)]
        if args.rate:
            results.append(run_e2e(world, args.ledgers, args.offloaded_every, rate=args.rate))
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
    else:
        print_table(results)


if __name__ == "__main__":
    main()
