"""The delete-phase ceiling figures in one run on one ZooKeeper: the daemon against the verifying ceiling and the peer.

    python -m bench.ceiling [--ledgers 20000] [--rate 2000] [--profile-dir DIR] [--json]

* **c**, the ceiling of a verifying deleter: the project's own ``MetadataStore.get_many``
  of the BookKeeper nodes, then ``delete_many`` at the versions read, in multis of 1,000,
  a batch of 1,000 ledgers at a time (as the daemon takes them), nothing else;
* **e**, the peer: Pulsar's pre-PIP-186 one-phase path at its best, a blind kazoo
  ``delete_async`` (version -1) of every node, all sent before the first reply is awaited;
* **d**, the daemon end to end (``bench.e2e``: ``ledger-deletion run`` as its own process on
  the embedded broker, requests enqueued beforehand, first deletion to last seen in
  ZooKeeper), for ``--ledgers`` closed, unreferenced ledgers of one topic: once with the
  audit trail on (the default an operator runs), once with it off
  (:mod:`bench.daemon_without_audit`) so its cost is visible, and once with the trail on and
  ``ledgerDeletionDeleteProcess = off`` (everything on the daemon's one thread) so the delete
  process's share is visible; the default (``auto``) uses one on 2 CPUs;
* d/c and d/e, and the mark phase (``bench.mark_phase``: ``trim`` of 10,000 ledgers over 100 topics);
* the daemon paced: requests sent at ``--rate`` per second (2,000; 0 skips it) over the bench's
  topics, with the rate achieved, p50/p99 from send to deletion and the daemon's peak RSS.

``--profile-dir`` adds one more drain, sampled by py-spy (``--threads``, raw
folded stacks), whose figure is not reported (sampling slows it).  Seeding and sending are
never timed; figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from bench import e2e, mark_phase
from bench.seed import connect
from bench.zk_limits import REPLY_TIMEOUT_S, Rate, fresh_chroot, seed_one_topic, windows
from deletion_service import logs
from deletion_service.embedded.broker import EmbeddedBroker
from metastore import open_store
from metastore.interface import NodeDeleteOutcome

#: The daemon's batch (``twoPhaseDeletionBatchSize``) and the multi size of the ceiling's deletes.
BATCH = 1000
TARGETS = {"d/c": 0.25, "d/e": 1.5}
P99_TARGET_MS = 250


def verifying_ceiling(world: e2e.World, n: int) -> Rate:
    """c: per batch of :data:`BATCH`, ``get_many`` then ``delete_many`` at the versions read, multis of 1,000."""
    chroot = fresh_chroot()
    paths = seed_one_topic(world.zk.hosts, chroot, n)
    deleted = 0
    with open_store(f"{world.zk.url}{chroot}") as store:
        started = time.perf_counter()
        for chunk in windows(paths, BATCH):
            nodes = store.get_many(chunk)
            targets = [(p, node.version) for p, node in nodes.items() if node is not None]
            outcomes = store.delete_many(targets, batch_size=BATCH)
            deleted += sum(1 for o in outcomes.values() if o == NodeDeleteOutcome.DELETED)
        elapsed = time.perf_counter() - started
    return Rate("c: get_many + delete_many", deleted, elapsed)


def one_phase_peer(world: e2e.World, n: int) -> Rate:
    """e: every node deleted blind (version -1) by kazoo ``delete_async``, all sent before any reply is awaited."""
    chroot = fresh_chroot()
    paths = seed_one_topic(world.zk.hosts, chroot, n)
    with connect(world.zk.hosts, chroot) as client:
        started = time.perf_counter()
        pending = [client.delete_async(p, version=-1) for p in paths]
        deleted = sum(1 for d in pending if d.get(timeout=REPLY_TIMEOUT_S))
        elapsed = time.perf_counter() - started
    return Rate("e: one-phase blind delete_async", deleted, elapsed)


def run(world: e2e.World, ledgers: int, rate: float, profile_dir: Path | None) -> dict:
    say = e2e._say
    say("c: the verifying ceiling")
    c = verifying_ceiling(world, ledgers)
    say("e: the one-phase peer")
    e = one_phase_peer(world, ledgers)
    say("d: the daemon, audit trail on")
    d = e2e.run_e2e(world, ledgers, offloaded_every=0, topics=1)
    say("d: the daemon, audit trail off")
    d_off = e2e.run_e2e(world, ledgers, offloaded_every=0, topics=1, audit=False)
    say("d: the daemon, audit trail on, no delete process")
    d_one = e2e.run_e2e(world, ledgers, offloaded_every=0, topics=1, delete_process=False)
    say("mark phase: 10,000 ledgers over 100 topics")
    broker_url = EmbeddedBroker(world.data_dir).ensure().serviceUrl
    mark = mark_phase.run_mark_phase(f"{world.zk.url}/mark-{os.getpid()}", broker_url, 10_000, 100)
    paced = None
    if rate:
        say(f"the daemon paced at {rate:g} requests/s")
        paced = e2e.run_e2e(world, ledgers, offloaded_every=0, rate=rate)
    if profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
        say(f"profiled drain (py-spy) into {profile_dir}/daemon.folded")
        e2e.run_e2e(world, ledgers, offloaded_every=0, topics=1, profile=profile_dir / "daemon.folded")
    return figures(c, e, [d, d_off, d_one], mark, paced)


def figures(c: Rate, e: Rate, drains: Sequence[e2e.E2EResult], mark: dict, paced: e2e.E2EResult | None) -> dict:
    rows = [{"name": name, "ledgers": r.ledgers, "seconds": round(r.seconds, 2), "perSecond": round(rate),
             "peakRssMb": r.peak_rss_mb, "leftInZookeeper": r.left_in_zookeeper}
            for name, r, rate in (("d: daemon, audit on", drains[0], drains[0].ledgers_per_second),
                                  ("d: daemon, audit off", drains[1], drains[1].ledgers_per_second),
                                  ("d: audit on, one process", drains[2], drains[2].ledgers_per_second))]
    d = drains[0].ledgers_per_second
    return {
        "c": {"ledgers": c.ledgers, "seconds": round(c.seconds, 2), "perSecond": round(c.per_second)},
        "e": {"ledgers": e.ledgers, "seconds": round(e.seconds, 2), "perSecond": round(e.per_second)},
        "d": rows,
        "ratios": {"d/c": round(d / c.per_second, 3), "d/e": round(d / e.per_second, 2),
                   "d/c, audit off": round(drains[1].ledgers_per_second / c.per_second, 3),
                   "d/e, audit off": round(drains[1].ledgers_per_second / e.per_second, 2),
                   "d/e, one process": round(drains[2].ledgers_per_second / e.per_second, 2)},
        "markPhase": {k: round(v, 2) if isinstance(v, float) else v for k, v in mark.items()},
        "drains": [asdict(r) for r in drains],
        "paced": None if paced is None else asdict(paced),
    }


def print_report(f: dict) -> None:
    print(f"{'figure':<34}{'ledgers':>9}{'seconds':>9}{'ledgers/s':>11}{'RSS MB':>8}")
    for key in ("c", "e"):
        r = f[key]
        label = "c: get_many + delete_many" if key == "c" else "e: one-phase blind delete_async"
        print(f"  {label:<32}{r['ledgers']:>9}{r['seconds']:>9.2f}{r['perSecond']:>11}")
    for r in f["d"]:
        print(f"  {r['name']:<32}{r['ledgers']:>9}{r['seconds']:>9.2f}{r['perSecond']:>11}{r['peakRssMb']:>8.0f}"
              + (f"  NOT DONE: {r['leftInZookeeper']} left" if r["leftInZookeeper"] else ""))
    print()
    for name, value in f["ratios"].items():
        target = TARGETS.get(name)
        print(f"  {name:<20}{value:>8}" + (f"   target >= {target}" if target else ""))
    m = f["markPhase"]
    print(f"\nmark phase: {m['ledgers']} ledgers over {m['topics']} topics in {m['seconds']:.2f} s = "
          f"{m['ledgersPerSecond']:.0f} ledgers/s, {m['metadataWritesPerBatch']:g} metadata write(s) per topic"
          "   target >= 5000/s")
    p = f["paced"]
    if p is not None:
        print(f"{p['mode']}: {p['requests']} requests, achieved {p['requests_per_second']:.0f}/s, "
              f"send to deletion p50 {p['p50_ms']} ms, p99 {p['p99_ms']} ms   target p99 <= {P99_TARGET_MS} ms; "
              f"peak RSS {p['peak_rss_mb']:.0f} MB   target <= 200 MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ledgers", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=2000, help="paced run: requests per second (0: skip)")
    parser.add_argument("--profile-dir", type=Path, default=None, help="also profile one drain with py-spy")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logs.configure(logging.WARNING)  # as the CLI does: library chatter off (see bench.mark_phase)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    with e2e.Servers() as world:
        result = run(world, args.ledgers, args.rate, args.profile_dir)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_report(result)


if __name__ == "__main__":
    main()
