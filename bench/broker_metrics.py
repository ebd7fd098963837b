"""Reading a pulsar-lite broker's ``/metrics`` for one subscription: the daemon's gauge refresh, ``inflight``
and ``status`` read it this way (``MetricsBacklog``) on an embedded or external pulsar-lite.

    python -m bench.broker_metrics [--topics 100,300,600] [--repeat 3]

A real pulsar-lite process (the embedded broker of a data dir); for each size, that many topics with
three subscriptions each (ours, our DLQ's, another), then its page fetched once and read for our
subscription: the topics' stats (``parse_metrics``) and the topics it counts (``counted_topics``), as
the daemon reads them, beside the whole page read by Prometheus' parser (what reading cost before
only the wanted lines were parsed).  Best of ``--repeat``; figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import urllib.request
from pathlib import Path

import pulsar
from prometheus_client.parser import text_string_to_metric_families

from deletion_service.broker.subscription_stats import counted_topics, parse_metrics
from deletion_service.embedded.broker import EmbeddedBroker

SUBSCRIPTIONS = ("ledger-deletion", "ledger-deletion-dlq", "reader")


def _best(fn, repeat: int) -> float:  # noqa: ANN001 - a timing loop
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read().decode()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--topics", default="100,300,600", help="comma-separated topic counts")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as tmp:
        broker = EmbeddedBroker(Path(tmp))
        info = broker.ensure()
        client = pulsar.Client(info.serviceUrl, operation_timeout_seconds=30,
                               logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        made = 0
        try:
            print(f"{'topics':>7} {'lines':>7} {'KB':>6} {'stats':>8} {'counted':>8} {'whole page':>11}")
            for size in [int(n) for n in args.topics.split(",")]:
                for k in range(made, size):
                    for sub in SUBSCRIPTIONS:
                        client.subscribe(f"persistent://t{k}/ns/requests", sub).close()
                made = max(made, size)
                deadline = time.monotonic() + 60  # the broker counts a topic at its next refresh
                while len(counted_topics(text := _fetch(info.metricsUrl))) < size and time.monotonic() < deadline:
                    time.sleep(1)
                stats = _best(lambda: parse_metrics(text, "ledger-deletion"), args.repeat)
                counted = _best(lambda: counted_topics(text), args.repeat)
                whole = _best(lambda: [f.samples for f in text_string_to_metric_families(text)], args.repeat)
                print(f"{size:7d} {len(text.splitlines()):7d} {len(text) // 1024:6d} {stats:7.3f}s {counted:7.3f}s "
                      f"{whole:10.3f}s")
        finally:
            client.close()
            broker.stop()


if __name__ == "__main__":
    main()
