"""The replica scale figure: 20,000 requests drained by 1, 2 and 3 daemon replicas, side by side.

    python -m bench.replicas [--requests 20000] [--replicas 1,2,3] [--partitions 4] [--rounds 1]

One ZooKeeper and one pulsar-lite broker process for the whole run; per replica count, a fresh
chroot and topic: the orphan ledgers written, every request sent (``enqueue``, one process), and
only then the replicas started.  Neither writing nor sending is timed: the rate is requests
settled per second from the first ledger seen gone in ZooKeeper to the last (``bench.e2e``'s
:class:`~bench.e2e.Watcher`, polled by this process), as ``bench.e2e``'s drain is timed.

Per process (each replica, the broker, ZooKeeper, and this process: the watcher's polling), over
the samples (every 0.2 s) around that first-to-last window: its CPU (``/proc/<pid>/stat``) and its
runnable wait (``schedstat``'s run delay, summed over its threads), each in cores.  CPU alone
cannot tell a process that waits on a disk sync from one that wants a core and is not given one;
the wait can: a drain whose processes add up to little CPU *and* little runnable wait is waiting
on I/O or round trips, one with a large runnable wait is short of cores (on a machine other
sessions share, often for their sake).  ``ready`` is when each replica answered /readyz, counted
from the first deletion (negative: before it): a replica that starts late takes a smaller share.
``--rounds`` repeats the counts interleaved.  A figure, never an assertion (see bench/README.md).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import threading
import time
import uuid
from pathlib import Path

from bench.e2e import Watcher
from metastore.formats.ledger_paths import ledger_path
from tests.support.harness import PulsarLiteBroker, ZooKeeperServer
from tests.support.replicas_world import Replica, ReplicaWorld

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far, its ended threads included (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime


def runnable_wait(pid: int, seen: dict[str, int]) -> float:
    """Seconds ``pid``'s threads spent runnable but waiting for a core (``schedstat``'s run delay):
    what separates "this process waits on I/O" from "this process wants a core it cannot get".
    ``seen`` keeps each thread's last reading, so a thread that ended still counts."""
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            seen[task.name] = int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return sum(seen.values()) / 1e9


class CpuSampler(threading.Thread):
    """Every process's CPU seconds, every ``interval_s``, stamped on ``time.perf_counter`` (the Watcher's clock)."""

    def __init__(self, pids: dict[str, int], interval_s: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.pids, self.interval_s = pids, interval_s
        self.samples: list[tuple[float, dict[str, tuple[float, float]]]] = []
        self.stop = threading.Event()
        self._threads: dict[str, dict[str, int]] = {}

    def _sample(self) -> None:
        now = time.perf_counter()
        self.samples.append((now, {n: (cpu_seconds(p), runnable_wait(p, self._threads.setdefault(n, {})))
                                   for n, p in dict(self.pids).items()}))

    def run(self) -> None:
        while True:
            self._sample()
            if self.stop.wait(self.interval_s):
                self._sample()
                return

    def shares(self, start: float, end: float) -> dict[str, tuple[float, float]]:
        """Each process's (CPU, runnable wait) in cores, between the last sample at or before ``start``
        and the first at or after ``end``."""
        before = max((s for s in self.samples if s[0] <= start), default=self.samples[0], key=lambda s: s[0])
        after = min((s for s in self.samples if s[0] >= end), default=self.samples[-1], key=lambda s: s[0])
        span = max(after[0] - before[0], 1e-9)
        out = {}
        for name in self.pids:
            (cpu0, wait0), (cpu1, wait1) = before[1].get(name, (0.0, 0.0)), after[1][name]
            out[name] = (round((cpu1 - cpu0) / span, 2), round((wait1 - wait0) / span, 2))
        return out


def measure(count: int, requests: int, partitions: int, zk: ZooKeeperServer, broker: PulsarLiteBroker,
            root: Path) -> dict:
    chroot = f"/bench-{uuid.uuid4().hex[:8]}"
    world = ReplicaWorld(root / f"n{count}", f"{zk.url}{chroot}", broker.service_url, partitions=partitions)
    try:
        ids = world.orphans(requests)
        t0 = time.perf_counter()
        world.enqueue(ids)
        enqueue_s = time.perf_counter() - t0
        paths = [ledger_path(world.writer.root, lid, world.writer.layout) for lid in ids]
        watcher = Watcher(zk.hosts, chroot, paths)
        watcher.start()
        replicas = world.add_replicas(count)
        sampler = CpuSampler({"broker": broker.pid, "zookeeper": zk.pid, "bench": os.getpid()})
        for replica in replicas:  # the sampler reads pids as it goes: each replica's joins once started
            replica.start()
            assert replica.proc is not None
            sampler.pids[replica.name] = replica.proc.pid
        sampler.start()
        ready = _wait_ready(replicas)
        watcher.join(600)
        sampler.stop.set()
        sampler.join()
        first, last = min(watcher.gone.values()), max(watcher.gone.values())
        seconds = last - first
        return {"replicas": count, "seconds": round(seconds, 1), "rate": round(len(watcher.gone) / max(seconds, 1e-9)),
                "enqueueSeconds": round(enqueue_s, 1), "left": watcher.total - len(watcher.gone),
                "readyAfterFirst": {n: round(t - first, 1) for n, t in ready.items()},
                "shares": world.shares(), "cpuCores": sampler.shares(first, last)}
    finally:
        world.close()


def _wait_ready(replicas: list[Replica]) -> dict[str, float]:
    """When each replica answered /readyz (perf_counter); they were all started together."""
    ready: dict[str, float] = {}
    deadline = time.monotonic() + 180
    while len(ready) < len(replicas) and time.monotonic() < deadline:
        for replica in replicas:
            if replica.name not in ready and replica.ready():
                ready[replica.name] = time.perf_counter()
        time.sleep(0.05)
    return ready


def print_table(rows: list[dict]) -> None:
    print(f"{'replicas':>8} {'seconds':>8} {'req/s':>7} {'send s':>7}  shares | ready (s after the first deletion)"
          " | per process: CPU/runnable-wait (cores), and their sums")
    for row in rows:
        shares = " ".join(f"{k}={v}" for k, v in row["shares"].items())
        ready = " ".join(f"{k}={v:+}" for k, v in row["readyAfterFirst"].items())
        cpu = " ".join(f"{k}={c}/{w}" for k, (c, w) in row["cpuCores"].items())
        total = "/".join(str(round(sum(v[i] for v in row["cpuCores"].values()), 2)) for i in (0, 1))
        left = f"  ({row['left']} LEFT)" if row["left"] else ""
        print(f"{row['replicas']:>8} {row['seconds']:>8} {row['rate']:>7} {row['enqueueSeconds']:>7}  {shares} | "
              f"{ready} | {cpu} sum={total}{left}")


def main() -> None:
    parser = argparse.ArgumentParser(description="Drain requests with 1, 2 and 3 daemon replicas, side by side.")
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--replicas", default="1,2,3")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1, help="measure the replica counts this many times, "
                        "interleaved (on a shared machine one round is noise)")
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="ld-bench-replicas-") as tmp:
        root = Path(tmp)
        zk = ZooKeeperServer(root / "zk").start()
        broker = PulsarLiteBroker(root / "broker").start()
        try:
            rows = [measure(int(n), args.requests, args.partitions, zk, broker, root / f"round{r}")
                    for r in range(args.rounds) for n in args.replicas.split(",")]
        finally:
            with contextlib.suppress(Exception):
                broker.stop()
            zk.stop()
    print_table(rows)
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min)")


if __name__ == "__main__":
    main()
