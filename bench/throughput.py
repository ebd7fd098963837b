"""The throughput figures in one run, on one ZooKeeper: the daemon against the limits that bound it.

    python -m bench.throughput [--ledgers 20000] [--scale 1000,10000,100000] [--plot bench/scale.png] [--json]

* end to end (``bench.e2e``): the daemon process draining ``--ledgers`` BookKeeper-only
  requests (the ratios' numerator); as many requests again for two thirds as many ledgers,
  every second one also offloaded to S3 (moto); and paced at 2,000 requests/s for latency
  and peak RSS;
* the limits (``bench.zk_limits``): raw kazoo pipelined get+delete and raw multi-op
  deletes of as many znodes; the one-phase (pre-PIP-186) path on the same data shape;
* the mark phase (``bench.mark_phase``): 10,000 ledgers over 100 topics;
* a scale curve: the BookKeeper-only drain at each ``--scale`` size, as a table and a
  PNG of seconds and microseconds per ledger against ledgers.

Figures are printed (a table, or ``--json``), never asserted.  Seeding and sending
are never timed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import asdict
from pathlib import Path

from bench import e2e, mark_phase, zk_limits
from deletion_service import logs
from deletion_service.embedded.broker import EmbeddedBroker

TARGETS = {"e2e / raw pipelined get+delete": 1.5, "e2e / one-phase baseline": 0.8}


def run(world: e2e.World, ledgers: int, scale: list[int], rate: float) -> dict:
    say = e2e._say
    say("limits: raw pipelined get+delete, raw multi deletes, one-phase baseline")
    limits = zk_limits.run_all(world.zk.hosts, ledgers)
    say("limits: the S3 server, bare boto3")
    s3 = e2e.raw_s3_calls(world)
    say("end to end: BookKeeper only, drained")
    bk_only = e2e.run_e2e(world, ledgers, offloaded_every=0)
    say("end to end: every second ledger also offloaded, drained")
    mixed = e2e.run_e2e(world, -(-ledgers * 2 // 3), offloaded_every=2)  # as many requests as ledgers above
    say(f"end to end: paced at {rate:g}/s")
    paced = e2e.run_e2e(world, ledgers, offloaded_every=0, rate=rate)
    say("mark phase: 10,000 ledgers over 100 topics")
    broker_url = EmbeddedBroker(world.data_dir).ensure().serviceUrl
    mark = mark_phase.run_mark_phase(f"{world.zk.url}/mark-{os.getpid()}", broker_url, 10_000, 100)
    curve = []
    for n in scale:
        say(f"scale curve: {n} ledgers")
        curve.append(e2e.run_e2e(world, n, offloaded_every=0))
    raw, _, one_phase = limits
    return {
        "limits": [{"name": r.name, "ledgers": r.ledgers, "seconds": round(r.seconds, 2),
                    "perSecond": round(r.per_second)} for r in limits],
        "s3": s3,
        "endToEnd": [asdict(bk_only), asdict(mixed), asdict(paced)],
        "ratios": {"e2e / raw pipelined get+delete": round(bk_only.ledgers_per_second / raw.per_second, 2),
                   "e2e / one-phase baseline": round(bk_only.ledgers_per_second / one_phase.per_second, 2)},
        "markPhase": mark,
        "scale": [{"ledgers": r.ledgers, "seconds": r.seconds, "ledgersPerSecond": r.ledgers_per_second,
                   "microsPerLedger": round(r.seconds / r.ledgers * 1e6, 1), "peakRssMb": r.peak_rss_mb}
                  for r in curve],
    }


def print_report(figures: dict) -> None:
    print("ZooKeeper limits (same server)      ledgers   seconds  ledgers/s")
    for r in figures["limits"]:
        print(f"  {r['name']:<32}{r['ledgers']:>9}{r['seconds']:>10.2f}{r['perSecond']:>11}")
    s3 = figures["s3"]
    print(f"  S3 server (moto), HEAD+GET+DELETE: {s3['callsPerSecond']} calls/s")
    print()
    e2e.print_table([e2e.E2EResult(**r) for r in figures["endToEnd"]])
    print()
    print(f"{'ratio':<36}{'measured':>9}{'target':>8}")
    for name, value in figures["ratios"].items():
        print(f"  {name:<34}{value:>8.2f}x{TARGETS[name]:>7.1f}x")
    m = figures["markPhase"]
    print(f"\nmark phase: {m['ledgers']} ledgers over {m['topics']} topics in {m['seconds']:.2f} s = "
          f"{m['ledgersPerSecond']:.0f} ledgers/s, {m['metadataWritesPerBatch']:g} metadata write(s) per topic")
    print("\nscale curve (BookKeeper only, drained)")
    print(f"  {'ledgers':>8}{'seconds':>9}{'ledgers/s':>11}{'us/ledger':>11}{'RSS MB':>8}")
    for r in figures["scale"]:
        print(f"  {r['ledgers']:>8}{r['seconds']:>9.2f}{r['ledgersPerSecond']:>11}{r['microsPerLedger']:>11}"
              f"{r['peakRssMb']:>8.0f}")


def plot(figures: dict, path: Path) -> None:
    """Seconds and µs per ledger against ledgers, log-log: linear cost is a flat µs line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [r["ledgers"] for r in figures["scale"]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.loglog(xs, [r["seconds"] for r in figures["scale"]], "o-", label="measured")
    if xs:
        base = figures["scale"][0]
        left.loglog(xs, [base["seconds"] * x / xs[0] for x in xs], "--", color="grey", label="linear from the first")
    left.set_xlabel("ledgers")
    left.set_ylabel("seconds, first deletion to last")
    left.legend()
    right.semilogx(xs, [r["microsPerLedger"] for r in figures["scale"]], "o-")
    right.set_ylim(bottom=0)
    right.set_xlabel("ledgers")
    right.set_ylabel("µs per ledger (flat or falling = linear or better)")
    fig.suptitle("ledger-deletion daemon: drain time against ledgers (ZooKeeper + pulsar-lite, 2 cores)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ledgers", type=int, default=20_000)
    parser.add_argument("--scale", default="1000,10000,100000", help="comma-separated sizes for the scale curve")
    parser.add_argument("--rate", type=float, default=2000, help="paced run: requests per second")
    parser.add_argument("--plot", type=Path, default=Path("bench/scale.png"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logs.configure(logging.WARNING)  # as the CLI does: library chatter off (see bench.mark_phase)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    scale = [int(s) for s in args.scale.split(",") if s.strip()]
    with e2e.Servers() as world:
        figures = run(world, args.ledgers, scale, args.rate)
    plot(figures, args.plot)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print_report(figures)
        print(f"\nplot: {args.plot}", file=sys.stderr)


if __name__ == "__main__":
    main()
