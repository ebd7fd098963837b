"""The leak watcher at scale on real ZooKeeper: first sync, memory, read load, and leak latency under rollovers.

    python -m bench.leak_watcher [--topics 100000] [--namespaces 100] [--settle 10] [--pass-seconds 5]
                                 [--roll-rate 1000] [--roll-seconds 120] [--leak-every 100] [--json]

Seeds (not timed) one ZooKeeper (the tests' server, with a 1 GB heap) with ``--topics`` managed
ledgers over ``--namespaces`` namespaces,
as Pulsar lays them out (``/managed-ledgers/<tenant>/<ns>/persistent/<topic>``), each listing ten
ledgers and holding one cursor whose state is in a cursor ledger.  BookKeeper ledger znodes are
seeded only for the ledgers the roller will drop: the watcher asks BookKeeper only about what left
a list.

Then three processes besides ZooKeeper:

* the watcher (``--child watcher``): :class:`~deletion_service.leak_watcher.watcher.LeakWatcher`
  over a store that counts what it asks of ZooKeeper, a pass every ``--pass-seconds`` (at once when
  a pass took longer), checking storage with the daemon's own check
  (:func:`~deletion_service.leak_watcher.storage.still_stored`) and timestamping every request it
  sends.  Its peak RSS is its own ``VmHWM``: seeding does not count;
* the roller (``--child roller``), started once the watcher has made its first pass and one more:
  ``--roll-rate`` rollovers a second for ``--roll-seconds``, each appending a new ledger to one
  topic's list and dropping its oldest (one list write per topic; the rolls due every 20 ms go to
  ZooKeeper in one transaction).  Right after a list write commits, the dropped
  ledgers' BookKeeper znodes are deleted, as a one-phase broker's storage delete does, except
  every ``--leak-every``-th: that delete "fails", the znode stays, the ledger leaked.  The roller
  records when each leaked ledger's list write committed;
* this process, which reads both and prints the figures.

Figures: the first pass's duration (a full read, nothing to compare with); the watcher's peak
RSS; per pass at steady state (passes that began and ended while the roller ran, but the first),
its duration (and how much of it went to reading and to storage checks), the ZooKeeper reads it
made (nodes read, listings, and the requests carrying them) divided by the time between pass
starts, and the watcher's CPU; the cores the watcher, ZooKeeper, the roller and the whole machine
used while the roller ran (the watcher's runnable wait: wanting a core and not getting one); for
every leaked ledger, the time from its list write to the watcher's request (p50/p99, against
``--settle`` + 30 s), and whether any ledger the broker did delete was requested.  The settle
delay is short here (10 s) so that a run ends in minutes; the daemon's default is 120 s, and a
leak's latency is the settle delay plus what the passes add (up to about two passes).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from queue import Empty, Queue
from typing import Any

from bench.replicas import runnable_wait
from bench.seed import connect, create_all, ensure_parents, seed_ledgers
from metastore.formats import (
    LedgerInfo,
    LedgerLayout,
    ManagedCursorInfo,
    ManagedLedgerInfo,
    Position,
    cursor_path,
    encode_cursor,
    encode_managed_ledger,
    ledger_path,
    managed_ledger_path,
)
from metastore.formats.managed_ledger import encode_ledger_info
from metastore.formats.protobuf_codec import write_varint
from metastore.interface import MetadataStore, Node, Op

CHROOT = "/bench-leak-watcher"
LEDGERS_ROOT = "/ledgers"
LAYOUT = LedgerLayout.HIERARCHICAL
LISTED = 10  # ledgers per topic
SUBSCRIPTION = "sub"
#: Cursor ledgers' ids start here, far above every data ledger's.
CURSOR_LEDGER_BASE = 1_000_000_000
#: Rolls in one roller transaction at most; transactions the roller keeps in flight.
ROLLS_PER_TRANSACTION = 200
ROLLER_IN_FLIGHT = 4
#: How often the roller sends the rolls that fell due (a kazoo request costs the roller ~0.5 ms of CPU).
ROLL_TICK_S = 0.02
SEED = 7
ZOOKEEPER_HEAP = "-Xmx1g"


# --------------------------------------------------------------------------- what is seeded and rolled


@dataclass(frozen=True)
class Plan:
    """Topic ``i`` lists ledgers ``10i+1 … 10i+10`` and has one cursor with cursor ledger
    ``CURSOR_LEDGER_BASE + i``.  Roll ``r`` rolls topic ``order[r % topics]``: it drops that topic's
    oldest ledger (its ``r // topics``-th seeded one) and appends ledger ``10·topics + 1 + r``."""

    topics: int
    namespaces: int
    rolls: int
    leak_every: int

    def topic(self, i: int) -> str:
        ns = i % self.namespaces
        return f"persistent://tenant-{ns // 10}/ns-{ns % 10}/topic-{i}"

    def seeded(self, i: int) -> range:
        return range(LISTED * i + 1, LISTED * i + LISTED + 1)

    def order(self) -> list[int]:
        order = list(range(self.topics))
        random.Random(SEED).shuffle(order)
        return order

    def appended(self, r: int) -> int:
        return LISTED * self.topics + 1 + r

    def leaks(self, r: int) -> bool:
        return r % self.leak_every == self.leak_every // 2

    def dropped(self) -> Iterator[tuple[int, int]]:
        """(ledger id, topic index) of every ledger a roll drops."""
        order = self.order()
        for r in range(self.rolls):
            topic = order[r % self.topics]
            yield self.seeded(topic)[r // self.topics], topic


def _listing(ids: Iterable[int], timestamp_ms: int) -> bytes:
    return encode_managed_ledger(ManagedLedgerInfo(
        [LedgerInfo(lid, entries=10, size=1024, timestamp=timestamp_ms) for lid in ids], {}))


def _listed_entry(ledger_id: int, timestamp_ms: int) -> bytes:
    """One ledger's entry in a managed-ledger node (field 1, length-delimited): a node listing only
    ledgers is its entries one after another, byte for byte :func:`_listing` (the roller's rolls
    cost a join, not an encode)."""
    info = encode_ledger_info(LedgerInfo(ledger_id, entries=10, size=1024, timestamp=timestamp_ms))
    return b"\x0a" + write_varint(len(info)) + info


def _progress(items: Iterable[Any], total: int, what: str) -> Iterator[Any]:
    started, step = time.perf_counter(), max(1, total // 10)
    for n, item in enumerate(items, 1):
        yield item
        if n % step == 0 or n == total:
            print(f"  seeding {what}: {n:,}/{total:,} ({time.perf_counter() - started:.0f} s)", flush=True)


def seed(hosts: str, plan: Plan, timestamp_ms: int) -> float:
    """Managed ledgers, their cursors, and the BookKeeper znodes of the ledgers the roller drops."""
    started = time.perf_counter()
    topics = [plan.topic(i) for i in range(plan.topics)]
    with connect(hosts, CHROOT) as client:
        ensure_parents(client, [managed_ledger_path(topics[i]) for i in range(min(plan.namespaces, plan.topics))])
        create_all(client, _progress(((managed_ledger_path(t), _listing(plan.seeded(i), timestamp_ms))
                                      for i, t in enumerate(topics)), plan.topics, "managed ledgers"))
        cursors = ((cursor_path(t, SUBSCRIPTION), encode_cursor(ManagedCursorInfo(
            CURSOR_LEDGER_BASE + i, Position(plan.seeded(i)[0], -1)))) for i, t in enumerate(topics))
        create_all(client, _progress(cursors, plan.topics, "cursors"))
    dropped = dict(plan.dropped())
    print(f"  seeding {len(dropped):,} BookKeeper ledger znodes (the ledgers the roller drops)", flush=True)
    seed_ledgers(hosts, CHROOT, list(dropped), lambda lid: topics[dropped[lid]], LEDGERS_ROOT)
    return time.perf_counter() - started


def zookeeper(workdir: Path) -> Any:  # noqa: ANN401 - tests.support's server, imported here only
    """The tests' ZooKeeper with a heap for a few hundred thousand znodes (its 256 MB runs out while
    seeding 100,000 topics): the JVM takes the last ``-Xmx`` it is given."""
    from tests.support.harness import ZooKeeperServer

    class RoomyZooKeeper(ZooKeeperServer):
        def _spawn(self, argv: list[str], env: dict[str, str] | None = None) -> None:
            super()._spawn([a for arg in argv for a in ((arg, ZOOKEEPER_HEAP) if arg.startswith("-Xmx") else (arg,))],
                           env)

    return RoomyZooKeeper(workdir).start()


# --------------------------------------------------------------------------- the watcher's process


class CountingStore(MetadataStore):
    """A store that counts the reads asked of it: nodes, listings, and (on ZooKeeper) the requests
    that carried them (a multi-read of up to a thousand nodes is one)."""

    def __init__(self, inner: MetadataStore) -> None:
        self.inner = inner
        self.counts: Counter[str] = Counter()
        self.last_read_at = 0.0  # when the latest get_many or children_many returned
        self._lock = threading.Lock()
        connection = getattr(inner, "connection", None)
        if connection is not None:  # every ZooKeeper request goes through call() or send()
            for name in ("call", "send"):
                setattr(connection, name, self._counted(getattr(connection, name)))

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.counts[key] += n

    def _counted(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:  # noqa: ANN401 - kazoo's untyped replies
            self._count("requests")
            return fn(*args, **kwargs)
        return counted

    def get(self, path: str) -> Node | None:
        self._count("nodes")
        return self.inner.get(path)

    def get_many(self, paths: Iterable[str]) -> dict[str, Node | None]:
        paths = list(paths)
        self._count("nodes", len(paths))
        try:
            return self.inner.get_many(paths)
        finally:
            self.last_read_at = time.time()

    def children(self, path: str) -> list[str]:
        self._count("listings")
        return self.inner.children(path)

    def children_many(self, paths: Iterable[str]) -> dict[str, list[str]]:
        paths = list(paths)
        self._count("listings", len(paths))
        try:
            return self.inner.children_many(paths)
        finally:
            self.last_read_at = time.time()

    def put(self, path: str, data: bytes, expected_version: int) -> int:
        return self.inner.put(path, data, expected_version)

    def delete(self, path: str, expected_version: int) -> None:
        self.inner.delete(path, expected_version)

    def multi(self, ops: Sequence[Op]) -> list[int | None]:
        return self.inner.multi(ops)

    def close(self) -> None:
        self.inner.close()

    def taken(self) -> Counter[str]:
        """The counts since the last call."""
        with self._lock:
            out, self.counts = self.counts, Counter()
        return out


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def _emit(doc: dict[str, Any]) -> None:
    print(json.dumps(doc), flush=True)


def _stop_on_stdin() -> threading.Event:
    """Set when the parent writes a line or closes stdin."""
    stop = threading.Event()

    def wait() -> None:
        sys.stdin.readline()
        stop.set()

    threading.Thread(target=wait, daemon=True).start()
    return stop


class TimedChecks:
    """A storage check that records when the checks of a pass began and ended."""

    def __init__(self, check: Callable[[Any], bool]) -> None:
        self.check = check
        self.first: float | None = None
        self.last = 0.0

    def __call__(self, request: Any) -> bool:  # noqa: ANN401 - a PendingDeleteLedgerInfo
        if self.first is None:
            self.first = time.time()
        try:
            return self.check(request)
        finally:
            self.last = time.time()

    def taken(self) -> float:
        """Seconds from the first check to the last since the last call."""
        spent = self.last - self.first if self.first is not None else 0.0
        self.first = None
        return spent


def watcher_child(args: argparse.Namespace) -> None:
    logging.getLogger("deletion_service.leak_watcher").setLevel(logging.ERROR)  # a line per leak: not timed here
    from deletion_service.leak_watcher import persisted
    from deletion_service.leak_watcher.persisted import WatcherState
    from deletion_service.leak_watcher.storage import still_stored
    from deletion_service.leak_watcher.watcher import LeakWatcher
    from deletion_service.protocol.request import PendingDeleteLedgerInfo
    from metastore import open_store
    from offloaders.registry import OffloaderSettings

    store = CountingStore(open_store(args.url))
    bk = CountingStore(open_store(args.url))  # storage checks, counted apart from the reading
    sent: list[tuple[int, str, float]] = []

    def send(requests: Sequence[PendingDeleteLedgerInfo]) -> Sequence[PendingDeleteLedgerInfo]:
        at = time.time()
        sent.extend((r.ledger_id, r.ledger_type.value, at) for r in requests)
        return []

    check = TimedChecks(still_stored(bk, LEDGERS_ROOT, LAYOUT, OffloaderSettings()))
    kept, keep_s = [persisted.load(store.inner)], [0.0]

    def keep(state: WatcherState) -> None:  # as the daemon's role keeps it: before the checks and the send
        t0 = time.perf_counter()
        kept[0] = persisted.save(store.inner, state, kept[0])
        keep_s[0] = time.perf_counter() - t0

    watcher = LeakWatcher(store, check, send, args.settle, clock_ms=lambda: int(time.time() * 1000), keep=keep)
    stop = _stop_on_stdin()
    n = 0
    while not stop.is_set():
        started, cpu = time.time(), time.process_time()
        keep_s[0] = 0.0
        result = watcher.run_pass(now=started)
        ended = time.time()
        _emit({"pass": n, "started": started, "duration": ended - started, "cpu": time.process_time() - cpu,
               "read_s": store.last_read_at - started, "check_s": check.taken(), "keep_s": keep_s[0],
               "departed": result.departed, "requested": [r.ledger_id for r in result.requested],
               "deleted_by_broker": result.deleted_by_broker, "waiting": result.waiting,
               "reads": store.taken(), "checks": bk.taken(), "rss_mb": _status_mb("VmRSS"),
               "hwm_mb": _status_mb("VmHWM")})
        n += 1
        stop.wait(max(0.0, started + args.pass_seconds - time.time()))
    _emit({"done": True, "sent": sent, "hwm_mb": _status_mb("VmHWM")})
    store.close()
    bk.close()


# --------------------------------------------------------------------------- the roller's process


def roller_child(args: argparse.Namespace) -> None:
    plan = Plan(args.topics, args.namespaces, args.roll_rate * args.roll_seconds, args.leak_every)
    order = plan.order()
    lists: dict[int, deque[tuple[int, bytes]]] = {}  # each listed ledger and its entry in the node
    paths: dict[int, str] = {}
    leaked: list[tuple[int, float]] = []  # (ledger id, when its list write committed)
    committed_at: dict[int, float] = {}
    deletes: deque[Any] = deque()
    with connect(args.hosts, CHROOT) as client:
        pending: deque[tuple[Any, list[tuple[int, int]]]] = deque()

        def settle(result: Any, drops: list[tuple[int, int]]) -> None:  # noqa: ANN401 - kazoo's IAsyncResult
            failed = [x for x in result.get(timeout=60) if isinstance(x, Exception)]
            if failed:
                raise RuntimeError(f"a roll failed: {failed[0]!r}")
            while id(result) not in committed_at:  # its callback runs on kazoo's completion thread
                time.sleep(0.0005)
            at = committed_at.pop(id(result))
            gone = client.transaction()
            for r, dropped in drops:
                if plan.leaks(r):
                    leaked.append((dropped, at))
                else:  # the broker's storage delete, right after its metadata write
                    gone.delete(ledger_path(LEDGERS_ROOT, dropped, LAYOUT))
            deletes.append(gone.commit_async())
            while len(deletes) > ROLLER_IN_FLIGHT:
                _check(deletes.popleft())

        _emit({"ready": True})
        started, cpu = time.time(), time.process_time()
        r = 0
        while r < plan.rolls:
            due = min(plan.rolls, int((time.time() - started) * args.roll_rate) + 1)
            if due <= r:
                time.sleep(ROLL_TICK_S)  # the rolls due meanwhile go in one transaction
                continue
            tx = client.transaction()
            drops = []
            for i in range(r, min(due, r + ROLLS_PER_TRANSACTION)):
                topic = order[i % plan.topics]
                listed = lists.get(topic)
                if listed is None:
                    listed = lists[topic] = deque((lid, _listed_entry(lid, args.timestamp_ms))
                                                  for lid in plan.seeded(topic))
                drops.append((i, listed.popleft()[0]))
                listed.append((plan.appended(i), _listed_entry(plan.appended(i), args.timestamp_ms)))
                path = paths.get(topic) or paths.setdefault(topic, managed_ledger_path(plan.topic(topic)))
                tx.set_data(path, b"".join(entry for _, entry in listed))
            r += len(drops)
            result = tx.commit_async()
            result.rawlink(lambda res: committed_at.__setitem__(id(res), time.time()))
            pending.append((result, drops))
            while pending and (len(pending) > ROLLER_IN_FLIGHT or pending[0][0].ready()):
                settle(*pending.popleft())
        while pending:
            settle(*pending.popleft())
        elapsed = time.time() - started
        while deletes:
            _check(deletes.popleft())
    _emit({"done": True, "rolls": plan.rolls, "seconds": elapsed, "started": started, "leaked": leaked,
           "cpu": time.process_time() - cpu})


def _check(result: Any) -> None:  # noqa: ANN401 - kazoo's IAsyncResult
    failed = [x for x in result.get(timeout=60) if isinstance(x, Exception)]
    if failed:
        raise RuntimeError(f"a storage delete failed: {failed[0]!r}")


# --------------------------------------------------------------------------- this process


class Child:
    """A child process of this bench, its JSON lines read into a queue."""

    def __init__(self, role: str, args: argparse.Namespace, extra: list[str]) -> None:
        argv = [sys.executable, "-m", "bench.leak_watcher", "--child", role, "--topics", str(args.topics),
                "--namespaces", str(args.namespaces), "--settle", str(args.settle),
                "--pass-seconds", str(args.pass_seconds), "--roll-rate", str(args.roll_rate),
                "--roll-seconds", str(args.roll_seconds), "--leak-every", str(args.leak_every), *extra]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.lines: Queue[dict[str, Any]] = Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.lines.put(json.loads(line))
            else:
                print(line, end="", file=sys.stderr)

    def next(self, timeout: float) -> dict[str, Any]:
        try:
            return self.lines.get(timeout=timeout)
        except Empty:
            code = self.proc.poll()
            raise RuntimeError(f"no word from a child in {timeout:.0f} s (exit code {code})") from None

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("stop\n")
        self.proc.stdin.flush()


PASS_FIGURES = ("pass", "started", "duration", "cpu", "read_s", "check_s", "keep_s", "departed", "waiting", "reads",
                "checks", "rss_mb")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_busy_s() -> float:
    """CPU seconds every core of the machine spent busy (any process, this bench's or another's)."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, Path("/proc/stat").read_text().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


class Usage:
    """CPU and runnable wait (:func:`bench.replicas.runnable_wait`) of some processes and the machine's
    busy time, between two readings: in cores."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self._seen: dict[str, dict[str, int]] = {name: {} for name in pids}
        self.start = self._read()

    def _read(self) -> dict[str, float]:
        out = {"time": time.time(), "machine": _machine_busy_s()}
        for name, pid in self.pids.items():
            with contextlib.suppress(OSError):
                out[name] = _cpu_s(pid)
                out[f"{name} wait"] = runnable_wait(pid, self._seen[name])
        return out

    def cores(self) -> dict[str, float]:
        end = self._read()
        elapsed = end["time"] - self.start["time"]
        return {key: (end[key] - self.start[key]) / elapsed for key in end if key != "time" and key in self.start}


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def measure(hosts: str, zk_pid: int, args: argparse.Namespace) -> dict[str, Any]:
    url = f"zk://{hosts}{CHROOT}"
    watcher = Child("watcher", args, ["--url", url])
    roller: Child | None = None
    passes: list[dict[str, Any]] = []
    try:
        first = watcher.next(timeout=900)
        passes.append(first)
        print(f"first full sync: {first['duration']:.1f} s; RSS {first['rss_mb']:.0f} MB", flush=True)
        passes.append(watcher.next(timeout=900))
        print(f"a pass with nothing changed: {passes[-1]['duration']:.1f} s", flush=True)
        roller = Child("roller", args, ["--hosts", hosts, "--timestamp-ms", str(args.timestamp_ms)])
        assert roller.next(timeout=60).get("ready")
        roll_start = time.time()
        usage = Usage({"zookeeper": zk_pid, "watcher": watcher.proc.pid, "roller": roller.proc.pid})
        rolled: dict[str, Any] | None = None
        while rolled is None:
            with contextlib.suppress(Empty):
                rolled = roller.lines.get(timeout=0.5)
            while not watcher.lines.empty():
                passes.append(watcher.lines.get())
                p = passes[-1]
                print(f"pass {p['pass']}: {p['duration']:.1f} s, {p['departed']} departed, "
                      f"{len(p['requested'])} requested, {p['waiting']} waiting, RSS {p['rss_mb']:.0f} MB", flush=True)
            if rolled is None and roller.proc.poll() not in (None, 0):
                raise RuntimeError("the roller failed")
        roll_end = time.time()
        cores = usage.cores()
        cores["roller"] = rolled["cpu"] / rolled["seconds"]
        print(f"roller: {rolled['rolls']:,} rolls in {rolled['seconds']:.1f} s", flush=True)
        leaked = {lid: at for lid, at in rolled["leaked"]}
        requested = {lid for p in passes for lid in p["requested"]}
        deadline = time.time() + args.settle + 4 * max(args.pass_seconds, passes[-1]["duration"]) + 60
        while not set(leaked) <= requested and time.time() < deadline:
            try:
                p = watcher.next(timeout=max(1.0, deadline - time.time()))
            except RuntimeError:
                break
            passes.append(p)
            requested |= set(p["requested"])
        watcher.stop()
        while "done" not in (last := watcher.next(timeout=600)):
            passes.append(last)
        roller.proc.wait(timeout=30)
    finally:
        if watcher.proc.poll() is None:
            watcher.stop()
            watcher.proc.wait(timeout=120)
        if roller is not None and roller.proc.poll() is None:
            roller.proc.terminate()  # by its PID: a run that failed half-way
            roller.proc.wait(timeout=30)
    sent = {lid: at for lid, kind, at in last["sent"] if kind == "LEDGER"}
    latencies = [sent[lid] - removed for lid, removed in leaked.items() if lid in sent]
    steady = [p for p in passes[2:] if p["started"] >= roll_start and p["started"] + p["duration"] <= roll_end]
    steady = steady[1:] or steady  # the first pass after the roller started compares with a quiet reading
    starts = [p["started"] for p in passes]
    periods = {p["pass"]: starts[i + 1] - starts[i] for i, p in enumerate(passes[:-1])}
    steady = [p for p in steady if p["pass"] in periods]

    def per_s(key: str, of: str = "reads") -> float:
        return statistics.median(p[of].get(key, 0) / periods[p["pass"]] for p in steady) if steady else float("nan")

    def median(key: str) -> float:
        return statistics.median(p[key] for p in steady) if steady else float("nan")

    return {
        "topics": args.topics, "namespaces": args.namespaces, "listed_ledgers": args.topics * LISTED,
        "cursors": args.topics, "settle_s": args.settle, "pass_seconds": args.pass_seconds,
        "first_sync_s": first["duration"], "first_sync_cpu_s": first["cpu"],
        "first_sync_reads": first["reads"], "quiet_pass_s": passes[1]["duration"],
        "peak_rss_mb": last["hwm_mb"],
        "steady_passes": len(steady), "steady_pass_s": median("duration"), "steady_pass_cpu_s": median("cpu"),
        "steady_read_s": median("read_s"), "steady_check_s": median("check_s"), "steady_keep_s": median("keep_s"),
        "steady_period_s": statistics.median(periods[p["pass"]] for p in steady) if steady else float("nan"),
        "zk_node_reads_per_s": per_s("nodes"), "zk_listings_per_s": per_s("listings"),
        "zk_requests_per_s": per_s("requests"),
        "storage_checks_per_s": per_s("nodes", "checks"), "storage_requests_per_s": per_s("requests", "checks"),
        "rolls": rolled["rolls"], "roll_rate": rolled["rolls"] / rolled["seconds"], "cores_while_rolling": cores,
        "leaked": len(leaked), "leaks_requested": len(latencies), "leaks_missed": len(leaked) - len(latencies),
        "requests_not_leaked": len(set(sent) - set(leaked)),
        "latency_p50_s": _pct(latencies, 0.5), "latency_p99_s": _pct(latencies, 0.99),
        "latency_max_s": max(latencies, default=float("nan")), "latency_target_s": args.settle + 30,
        "passes": [{k: p[k] for k in PASS_FIGURES} | {"requested": len(p["requested"])} for p in passes],
    }


def report(f: dict[str, Any]) -> None:
    rows = [
        ("topics / listed ledgers / cursors", f"{f['topics']:,} / {f['listed_ledgers']:,} / {f['cursors']:,}", ""),
        ("first full sync (first pass: reads only)", f"{f['first_sync_s']:.1f} s (CPU {f['first_sync_cpu_s']:.1f} s)",
         ""),
        ("a pass with nothing changed", f"{f['quiet_pass_s']:.1f} s", ""),
        ("watcher peak RSS (VmHWM)", f"{f['peak_rss_mb']:.0f} MB", "≤ 300 MB"),
        (f"steady pass (median of {f['steady_passes']}), under the roller",
         f"{f['steady_pass_s']:.1f} s (CPU {f['steady_pass_cpu_s']:.1f} s), a pass every "
         f"{f['steady_period_s']:.1f} s", ""),
        ("  of which reading / keeping the state / storage checks",
         f"{f['steady_read_s']:.1f} / {f['steady_keep_s']:.1f} / {f['steady_check_s']:.1f} s", ""),
        ("ZooKeeper reads at steady state: nodes + listings /s",
         f"{f['zk_node_reads_per_s']:,.0f} + {f['zk_listings_per_s']:,.0f} in {f['zk_requests_per_s']:,.0f} requests/s",
         ""),
        ("storage checks (BookKeeper znode reads) /s",
         f"{f['storage_checks_per_s']:,.0f} in {f['storage_requests_per_s']:,.0f} requests/s", ""),
        ("roller", f"{f['rolls']:,} rolls at {f['roll_rate']:,.0f} /s, {f['leaked']:,} leaked", ""),
        ("cores while rolling: watcher (runnable wait) / ZooKeeper / roller / machine",
         "{watcher:.2f} ({watcher wait:.2f}) / {zookeeper:.2f} / {roller:.2f} / {machine:.2f}".format_map(
             {"watcher wait": 0.0, **f["cores_while_rolling"]}), "of 2"),
        (f"leak to request, settle delay {f['settle_s']:g} s: p50 / p99 / max",
         f"{f['latency_p50_s']:.1f} / {f['latency_p99_s']:.1f} / {f['latency_max_s']:.1f} s",
         f"p99 ≤ {f['latency_target_s']:g} s"),
        ("leaks requested / missed; requests for ledgers the broker deleted",
         f"{f['leaks_requested']:,} / {f['leaks_missed']:,}; {f['requests_not_leaked']:,}", "all / 0; 0"),
    ]
    width = max(len(r[0]) for r in rows) + 2
    vwidth = max(len(r[1]) for r in rows) + 2
    print(f"\n{'leak watcher, real ZooKeeper':<{width}}{'value':<{vwidth}}target")
    for name, value, target in rows:
        print(f"{name:<{width}}{value:<{vwidth}}{target}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--topics", type=int, default=100_000)
    parser.add_argument("--namespaces", type=int, default=100)
    parser.add_argument("--settle", type=float, default=10.0, help="the watcher's settle delay, seconds (default 10)")
    parser.add_argument("--pass-seconds", type=float, default=5.0, help="a pass starts this often (default 5)")
    parser.add_argument("--roll-rate", type=int, default=1000, help="rollovers per second (default 1000)")
    parser.add_argument("--roll-seconds", type=int, default=120)
    parser.add_argument("--leak-every", type=int, default=100, help="every N-th dropped ledger leaks (default 100)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    parser.add_argument("--child", choices=["watcher", "roller"], help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--hosts", help=argparse.SUPPRESS)
    parser.add_argument("--timestamp-ms", type=int, default=int(time.time() * 1000), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "watcher":
        return watcher_child(args)
    if args.child == "roller":
        return roller_child(args)
    rolls = args.roll_rate * args.roll_seconds
    if rolls > (LISTED - 1) * args.topics:
        parser.error(f"{rolls:,} rolls would drop ledgers the roller appended; fewer --roll-seconds or more --topics")
    plan = Plan(args.topics, args.namespaces, rolls, args.leak_every)
    with tempfile.TemporaryDirectory() as tmp:
        zk = zookeeper(Path(tmp) / "zk")
        try:
            print(f"seeding {args.topics:,} topics ({args.topics * LISTED:,} listed ledgers, {args.topics:,} cursors) "
                  f"over {args.namespaces} namespaces", flush=True)
            seeded_s = seed(zk.hosts, plan, args.timestamp_ms)
            print(f"seeded in {seeded_s:.0f} s (not counted)", flush=True)
            figures = measure(zk.hosts, zk.pid, args)
        finally:
            zk.stop()
    report(figures)
    if args.json:
        print(json.dumps({k: v for k, v in figures.items() if k != "passes"} | {"passes": figures["passes"]}))


if __name__ == "__main__":
    main()
