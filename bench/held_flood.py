"""One tenant's held flood, and what it costs another tenant: ``ledger-deletion run`` as its own process.

    python -m bench.held_flood [--flood 20000] [--held 4000] [--victims 100] [--due-after 12]
                              [--namespaces 20] [--hold-seconds 60] [--json]

pulsar-lite as its own process (it ignores delivery delays), the metadata store a SQLite file,
namespace scope with ``--namespaces`` namespaces (``t0/ns`` … each with one topic), and the daemon
with ``minLedgerAgeSeconds = 3600`` and ``ledgerDeletionMaxHeldInMemory = --held``.

1. **Without the flood**, t1 sends ``--victims`` requests for ledgers that become old enough
   ``--due-after`` seconds later (each is held, falls due, is deleted), then ``--victims`` requests
   for ledgers old enough already ("fresh").  Per ledger: deletion seen in the store minus its due
   time (fresh: minus its send).
2. **The flood**: t0 sends ``--flood`` requests for ledgers created now (an hour too young); the bench
   waits until the daemon has reconsumed every one to RETRY (``acked_total{outcome="reconsumed"}``).
3. **While the flood is held** (``--hold-seconds``, nothing else sent): the daemon's CPU (its
   ``/proc`` utime + stime, in cores), the messages it received (``received_total``), the RETRY copies
   the broker took on t0's RETRY topic (``pulsar_in_messages_total``) and its store
   (``pulsar_broker_storage_size``), each per minute.  The broker's metrics lag by up to ~10 s; the
   window is read from a first sample taken 15 s into the hold.
4. **With the flood held**, step 1 again.

Seeding and sending are not timed.  Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

import pulsar

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from deletion_service.embedded import broker as embedded_broker
from deletion_service.embedded.broker import free_port, stop_pid
from metastore import open_store
from metastore.formats import ledger_path

MIN_AGE_S = 3600
FLOOD_FIRST, VICTIM_FIRST = 1_000_000, 2_000_000


@dataclass
class Latency:
    p50_s: float
    max_s: float


@dataclass
class Hold:
    seconds: float
    daemon_cores: float
    received_per_min: float | None  # None: the daemon's /metrics did not answer within 10 s
    retry_writes_per_min: float
    store_bytes_per_min: float
    handed_back: float


@dataclass
class Figures:
    flood: int
    held_in_memory: int
    victims: int
    due_after_s: float
    due_without_flood: Latency
    fresh_without_flood: Latency
    due_with_flood: Latency
    fresh_with_flood: Latency
    hold: Hold


def _topic(ns: int) -> str:
    return f"persistent://t{ns}/ns/orders"


def _metrics(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read().decode()
    except (urllib.error.URLError, OSError):
        return ""


def _sum(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for m in re.finditer(rf"^{re.escape(name)}(?:\{{([^}}]*)\}})? (\S+)$", text, re.MULTILINE):
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(2))
    return total


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait(check, timeout: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


class World:
    def __init__(self, workdir: Path, namespaces: int, held: int) -> None:
        self.workdir = workdir
        self.store_url = f"sqlite:///{workdir / 'metadata.db'}"
        self.port, self.metrics_port, self.admin_port = free_port(), free_port(), free_port()
        self.broker = embedded_broker.spawn(workdir / "broker", self.port, self.metrics_port)
        embedded_broker.wait_ready(self.broker, self.port, self.metrics_port, workdir / "broker" / "broker.log")
        self.service_url = f"pulsar://127.0.0.1:{self.port}"
        with open_store(self.store_url) as store:
            writer = ClusterWriter(store)
            writer.ensure_layout()
            for ns in range(namespaces):
                writer.managed_ledger(_topic(ns), [1])  # lists an older ledger only: young ones are not superseded
        cfg = workdir / "held.toml"
        cfg.write_text(f'ledgerDeletionTopicScope = "namespace"\nminLedgerAgeSeconds = {MIN_AGE_S}\n'
                       f'ledgerDeletionMaxHeldInMemory = {held}\n')
        self.daemon = subprocess.Popen(
            [sys.executable, "-m", "deletion_service.cli.main", "--metadata-store", self.store_url, "--broker-url",
             self.service_url, "--config", str(cfg), "--data-dir", str(workdir / "data"), "run", "--admin-address",
             f"127.0.0.1:{self.admin_port}"], stdout=subprocess.DEVNULL,
            stderr=open(workdir / "daemon.log", "w"))  # noqa: SIM115
        _wait(lambda: self.daemon_metrics() != "" and self._subscribed(namespaces), 120, "the daemon")
        self.client = pulsar.Client(self.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        self.producers: dict[int, pulsar.Producer] = {}

    def _subscribed(self, namespaces: int) -> bool:
        text = self.broker_metrics()
        return all(f'namespace="t{ns}/ns"' in text for ns in range(namespaces))

    def daemon_metrics(self) -> str:
        return _metrics(f"http://127.0.0.1:{self.admin_port}/metrics")

    def broker_metrics(self) -> str:
        return _metrics(f"http://127.0.0.1:{self.metrics_port}/metrics")

    def ledgers(self, ns: int, ids: range, ctime_ms: int) -> None:
        with open_store(self.store_url) as store:
            writer = ClusterWriter(store)
            for lid in ids:
                writer.bk_ledger(lid, pulsar_custom_metadata(_topic(ns)), ctime_ms=ctime_ms)

    def send(self, ns: int, ids: range) -> float:
        """One request per ledger on the namespace's request topic; returns when the last was receipted."""
        producer = self.producers.get(ns)
        if producer is None:
            producer = self.producers[ns] = self.client.create_producer(
                f"persistent://t{ns}/ns/__ledger_deletion", batching_enabled=False, block_if_queue_full=True)
        now_ms = int(time.time() * 1000)
        for lid in ids:
            producer.send_async(json.dumps({"topicName": _topic(ns), "ledgerComponent": "MANAGED_LEDGER",
                                            "ledgerType": "LEDGER", "ledgerId": lid, "reason": "manual",
                                            "markedAt": now_ms}).encode(), None)
        producer.flush()
        return time.time()

    def deleted_at(self, ids: range, timeout: float) -> dict[int, float]:
        """When each ledger was seen gone from the store (polled every 50 ms)."""
        left, seen = set(ids), {}
        deadline = time.monotonic() + timeout
        with open_store(self.store_url) as store:
            while left and time.monotonic() < deadline:
                now = time.time()
                for lid in list(left):
                    if store.get(ledger_path("/ledgers", lid, "hierarchical")) is None:
                        seen[lid] = now
                        left.discard(lid)
                time.sleep(0.05)
        if left:
            raise SystemExit(f"{len(left)} of {len(ids)} ledgers not deleted within {timeout:.0f} s")
        return seen

    def close(self) -> None:
        self.client.close()
        self.daemon.send_signal(signal.SIGTERM)
        try:
            self.daemon.wait(30)
        except subprocess.TimeoutExpired:
            self.daemon.kill()
            self.daemon.wait(10)
        stop_pid(self.broker.pid)


def _latency(values: list[float]) -> Latency:
    return Latency(round(statistics.median(values), 2), round(max(values), 2))


def victims(world: World, first: int, count: int, due_after: float) -> tuple[Latency, Latency]:
    """t1's requests: due ``due_after`` s after sending (latency after due), then fresh ones (after send)."""
    due_ids = range(first, first + count)
    ctime_s = time.time() - MIN_AGE_S + due_after
    world.ledgers(1, due_ids, int(ctime_s * 1000))
    sent = world.send(1, due_ids)
    due_at = ctime_s + MIN_AGE_S  # a ledger is old enough MIN_AGE_S after its ctime
    due = [t - max(due_at, sent) for t in world.deleted_at(due_ids, 300).values()]
    fresh_ids = range(first + count, first + 2 * count)
    world.ledgers(1, fresh_ids, int((time.time() - 2 * MIN_AGE_S) * 1000))
    sent = world.send(1, fresh_ids)
    fresh = [t - sent for t in world.deleted_at(fresh_ids, 300).values()]
    return _latency(due), _latency(fresh)


def hold(world: World, seconds: float) -> Hold:
    time.sleep(15)  # the broker's metrics lag by up to ~10 s: start from a settled reading
    pid = world.daemon.pid
    d0, b0, c0, t0 = world.daemon_metrics(), world.broker_metrics(), _cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    d1, b1, c1, t1 = world.daemon_metrics(), world.broker_metrics(), _cpu_s(pid), time.monotonic()
    minutes = (t1 - t0) / 60

    def per_min(before: str, after: str, name: str, **labels: str) -> float:
        return round((_sum(after, name, **labels) - _sum(before, name, **labels)) / minutes, 1)

    return Hold(round(t1 - t0, 1), round((c1 - c0) / (t1 - t0), 3),
                per_min(d0, d1, "pulsar_ledger_deletion_received_total") if d0 and d1 else None,
                per_min(b0, b1, "pulsar_in_messages_total", namespace="t0/ns", topic="__ledger_deletion-RETRY"),
                per_min(b0, b1, "pulsar_broker_storage_size"),
                _sum(d1, "pulsar_ledger_deletion_retry_handed_back_total"))


def run(args: argparse.Namespace) -> Figures:
    with tempfile.TemporaryDirectory(prefix="held-flood-") as tmp:
        world = World(Path(tmp), args.namespaces, args.held)
        try:
            due_before, fresh_before = victims(world, VICTIM_FIRST, args.victims, args.due_after)
            flood = range(FLOOD_FIRST, FLOOD_FIRST + args.flood)
            world.ledgers(0, flood, int(time.time() * 1000))  # created now: an hour too young
            world.send(0, flood)
            _wait(lambda: _sum(world.daemon_metrics(), "pulsar_ledger_deletion_acked_total", outcome="reconsumed")
                  >= args.flood + args.victims, 600, "the flood reconsumed to RETRY")
            held = hold(world, args.hold_seconds)
            due_after, fresh_after = victims(world, VICTIM_FIRST + 2 * args.victims, args.victims, args.due_after)
        finally:
            world.close()
    return Figures(args.flood, args.held, args.victims, args.due_after, due_before, fresh_before, due_after,
                   fresh_after, held)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--flood", type=int, default=20_000, help="t0's requests for young ledgers")
    parser.add_argument("--held", type=int, default=4_000, help="ledgerDeletionMaxHeldInMemory")
    parser.add_argument("--victims", type=int, default=100, help="t1's requests per kind")
    parser.add_argument("--due-after", type=float, default=12.0, help="seconds from t1's send to its ledgers' age")
    parser.add_argument("--namespaces", type=int, default=20)
    parser.add_argument("--hold-seconds", type=float, default=60.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    figures = run(args)
    if args.json:
        print(json.dumps(asdict(figures)))
        return
    h = figures.hold
    print(f"flood {figures.flood} young requests from t0, {figures.held_in_memory} held in memory; "
          f"t1: {figures.victims} due {figures.due_after_s:g} s after sending, {figures.victims} fresh")
    print(f"{'t1, deleted after due (p50 / max)':40} without flood {figures.due_without_flood.p50_s} / "
          f"{figures.due_without_flood.max_s} s   with flood {figures.due_with_flood.p50_s} / "
          f"{figures.due_with_flood.max_s} s")
    print(f"{'t1 fresh, deleted after send':40} without flood {figures.fresh_without_flood.p50_s} / "
          f"{figures.fresh_without_flood.max_s} s   with flood {figures.fresh_with_flood.p50_s} / "
          f"{figures.fresh_with_flood.max_s} s")
    received = "n/a (its /metrics did not answer)" if h.received_per_min is None else f"{h.received_per_min:g}/min"
    print(f"while the flood is held ({h.seconds:g} s): daemon {h.daemon_cores} cores, received "
          f"{received}, RETRY writes {h.retry_writes_per_min:g}/min, broker store "
          f"{h.store_bytes_per_min / 1e6:.2f} MB/min, handed back {h.handed_back:g}")


if __name__ == "__main__":
    main()
