"""Issue 30's scale figure: 20,000 requests drained by 1, 2 and 3 daemon replicas, side by side.

    python -m bench.replicas [--requests 20000] [--replicas 1,2,3] [--partitions 4]

One ZooKeeper and one pulsar-lite broker process for the whole run; per replica count, a fresh
chroot and topic, the orphan ledgers written first, the replicas started and ready, then the
requests sent (``enqueue``, one process) while they drain.  The rate is requests settled per second
from the first send to the last ``deleted`` record in the replicas' audit trails; CPU is each
process's user+system seconds over that window (``/proc/<pid>/stat``), as a share of one core.
A figure, never an assertion (see bench/README.md).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from pathlib import Path

from tests.harness import PulsarLiteBroker, ZooKeeperServer
from tests.replicas_world import ReplicaWorld

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime


def _settled(world: ReplicaWorld) -> int:
    return sum(world.shares().values())


def measure(count: int, requests: int, partitions: int, zk: ZooKeeperServer, broker: PulsarLiteBroker,
            root: Path) -> dict:
    world = ReplicaWorld(root / f"n{count}", f"{zk.url}/bench-{uuid.uuid4().hex[:8]}", broker.service_url,
                         partitions=partitions)
    try:
        ids = world.orphans(requests)
        replicas = world.add_replicas(count)
        for replica in replicas:
            replica.start()
        for replica in replicas:
            replica.wait_ready(180)
        pids = {r.name: r.proc.pid for r in replicas if r.proc is not None}
        pids |= {"broker": broker.pid, "zookeeper": zk.pid}
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        t0 = time.monotonic()
        world.enqueue(ids)
        sent_s = time.monotonic() - t0
        while _settled(world) < requests:
            time.sleep(0.5)
        seconds = time.monotonic() - t0
        cpu = {name: round((cpu_seconds(pid) - before[name]) / seconds, 2) for name, pid in pids.items()}
        return {"replicas": count, "seconds": round(seconds, 1), "rate": round(requests / seconds),
                "enqueueSeconds": round(sent_s, 1), "shares": world.shares(), "cpuCores": cpu}
    finally:
        world.close()


def main() -> None:
    parser = argparse.ArgumentParser(description="Drain requests with 1, 2 and 3 daemon replicas, side by side.")
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--replicas", default="1,2,3")
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="ld-bench-replicas-") as tmp:
        root = Path(tmp)
        zk = ZooKeeperServer(root / "zk").start()
        broker = PulsarLiteBroker(root / "broker").start()
        try:
            rows = [measure(int(n), args.requests, args.partitions, zk, broker, root)
                    for n in args.replicas.split(",")]
        finally:
            broker.stop()
            zk.stop()
    print(f"{'replicas':>8} {'seconds':>8} {'req/s':>7} {'send s':>7}  shares / CPU (cores) per process")
    for row in rows:
        shares = " ".join(f"{k}={v}" for k, v in row["shares"].items())
        cpu = " ".join(f"{k}={v}" for k, v in row["cpuCores"].items())
        print(f"{row['replicas']:>8} {row['seconds']:>8} {row['rate']:>7} {row['enqueueSeconds']:>7}  {shares} | {cpu}")
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min)")


if __name__ == "__main__":
    main()
