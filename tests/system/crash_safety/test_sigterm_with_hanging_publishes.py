"""SIGTERM while RETRY publishes hang on a frozen broker: the daemon stops within the bound the
README states (well inside Kubernetes' 30 s grace period), and a later run settles every request
(nothing lost).

The test proves it stopped a daemon with publishes in flight, not an idle one: the first batch's
first RETRY receipt pauses the worker (a failpoint) until the broker has pushed every request to the
daemon and is frozen; the next batch's RETRY copies then go into a broker that never answers, and
the daemon's own metrics show that batch taken and not settled when SIGTERM arrives."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
import urllib.request
from pathlib import Path

import pytest

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from deletion_service.embedded.broker import EmbeddedBroker, alive, pids_serving
from deletion_service.failpoints import ENV as FAILPOINTS
from metastore import ANY, open_store
from metastore.formats import ledger_path
from tests.support.cli_runner import run_cli
from tests.support.daemon_ledgers import TOPIC, present, request_file
from tests.support.daemon_process import start_daemon
from tests.support.harness import free_port, wait_until
from tests.support.metrics_scrape import scrape

#: The README's promise for `run`: "stops within 20 s of SIGTERM" (Kubernetes kills at 30 s).
STOPS_WITHIN_S = 20
REQUESTS = 200
BATCH = 50  # several batches: the first is paused by the failpoint, the next meets the frozen broker


def _ledgers(url: str, ids: range, state: str) -> None:
    with open_store(url) as store:
        writer = ClusterWriter(store)
        writer.ensure_layout()
        for lid in ids:
            path = ledger_path("/ledgers", lid, "hierarchical")
            if store.get(path) is not None:
                store.delete(path, ANY)
            writer.bk_ledger(lid, pulsar_custom_metadata(TOPIC), state=state)


def _sum(text: str, name: str, labels: str = "") -> float:
    """The sum of every sample of ``name`` whose labels match the regex ``labels``."""
    return sum(float(value) for found_labels, value in re.findall(rf"^{name}(\{{[^}}]*\}})? (\S+)$", text, re.M)
               if re.search(labels, found_labels))


def _daemon(port: int) -> tuple[float, float]:
    """(received, acked) as the daemon's /metrics say."""
    text = scrape(port)
    return _sum(text, "pulsar_ledger_deletion_received_total"), _sum(text, "pulsar_ledger_deletion_acked_total")


def _pushed_requests(metrics_url: str) -> float:
    """Request messages the broker has dispatched to a consumer (its RETRY and DLQ topics left out)."""
    with urllib.request.urlopen(metrics_url, timeout=5) as r:
        text = r.read().decode()
    return _sum(text, "pulsar_out_messages_total", r'topic="__ledger_deletion(-partition-\d+)?"')


@pytest.mark.slow
def test_sigterm_with_retry_publishes_hanging_stops_in_time_and_loses_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    url = f"sqlite:///{data_dir / 'metadata.db'}"
    ids = range(1, REQUESTS + 1)
    _ledgers(url, ids, "OPEN")  # still open: every request is reconsumed, i.e. published to RETRY
    assert run_cli("enqueue", "--from-file", str(request_file(tmp_path / "r.jsonl", ids)),
                   "--data-dir", str(data_dir)).returncode == 0
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"twoPhaseDeletionReconsumeLaterInSeconds = 1\ntwoPhaseDeletionBatchSize = {BATCH}\n")
    port = free_port()
    # the first RETRY receipt holds the worker long enough to freeze the broker behind its back
    monkeypatch.setenv(FAILPOINTS, "retry.after-publish=sleep:5")
    proc = start_daemon(data_dir, "--config", str(cfg), port=port)
    monkeypatch.delenv(FAILPOINTS)
    broker = None
    try:
        wait_until(lambda: (data_dir / "broker" / "subscriptions.json").exists(), 60, "the daemon's consumers",
                   proc=proc)
        broker = EmbeddedBroker(data_dir).read_info()
        assert broker is not None
        metrics_url = broker.metricsUrl
        wait_until(lambda: _daemon(port)[0] > 0 and _pushed_requests(metrics_url) >= REQUESTS, 60,
                   "the first batch taken and every request pushed to the daemon", proc=proc, interval=0.1)
        os.kill(broker.pid, signal.SIGSTOP)  # frozen, not dead: sends and acks just hang
        received, acked = _daemon(port)
        assert acked == 0, "frozen before the first batch was settled (else raise the failpoint's sleep)"
        # the first batch settles (acks are not awaited); the next one is taken and its RETRY copies hang

        def next_batch_hangs() -> bool:
            now_received, now_acked = _daemon(port)
            return now_acked == received < now_received

        wait_until(next_batch_hangs, 60, "a batch taken after the freeze, not settled", proc=proc, interval=0.1)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=2 * STOPS_WITHIN_S)
        took = time.monotonic() - started
    finally:
        if broker is not None:
            with contextlib.suppress(ProcessLookupError):  # the daemon stops the broker it owns
                os.kill(broker.pid, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    print(f"stopped {took:.1f} s after SIGTERM")  # the figure for the closing note
    assert proc.returncode == 0, err
    assert "stopping: finishing the batch in hand" in err and "Traceback" not in err
    assert took < STOPS_WITHIN_S, f"stopped {took:.1f} s after SIGTERM\n{err}"

    _ledgers(url, ids, "CLOSED")  # now deletable: a run must find every request again
    r = run_cli("run", "--exit-when-idle", "--max-wait", "120", "--data-dir", str(data_dir), "--config", str(cfg),
                "--admin-address", f"127.0.0.1:{free_port()}", timeout=180)
    assert r.returncode == 0, r.stderr
    assert present(url, ids) == [], "every request was still there to settle"
    assert broker is not None and not alive(broker.pid), "the frozen broker was stopped with its daemon"
    assert pids_serving(data_dir.absolute() / "broker" / "db") == [], "no broker leaked"
