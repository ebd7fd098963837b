"""The backlog gauges after a restart with requests parked in the DLQ: no false 0 at any time."""

from __future__ import annotations

import signal
from pathlib import Path

from deletion_service.config import DeletionConfig
from deletion_service.embedded.broker import EmbeddedBroker, pids_serving, stop_pid
from deletion_service.protocol.topics import DeletionTopics
from tests.support.daemon_process import answers, start_daemon
from tests.support.deletion_world import GARBAGE, send_raw
from tests.support.harness import free_port, wait_until
from tests.support.metrics_scrape import metric, scrape


def _park_garbage_in_the_dlq(data_dir: Path) -> None:
    """A daemon dead-letters three undecodable messages, then stops."""
    port = free_port()
    proc = start_daemon(data_dir, port=port)
    try:
        wait_until(lambda: (data_dir / "broker" / "subscriptions.json").exists(), 60, "the daemon", proc=proc)
        info = EmbeddedBroker(data_dir).read_info()
        assert info is not None
        send_raw(info.serviceUrl, DeletionTopics.from_config(DeletionConfig()).partition_topics[0], GARBAGE)
        wait_until(lambda: metric(scrape(port), 'pulsar_ledger_deletion_acked_total{outcome="dlq"}') == 3, 60,
                   "three dead letters", proc=proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


def test_after_a_restart_the_dlq_gauge_shows_no_sample_until_it_reads_the_parked_requests(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    try:
        _park_garbage_in_the_dlq(data_dir)
        port = free_port()
        proc = start_daemon(data_dir, port=port)
        try:
            wait_until(lambda: answers(f"http://127.0.0.1:{port}/healthz"), 60, "the restarted daemon", proc=proc)
            seen: list[float | None] = []

            def settled() -> bool:
                seen.append(metric(scrape(port), "pulsar_ledger_deletion_dlq_size"))
                return seen[-1] is not None

            wait_until(settled, 60, "the DLQ gauge's first sample", proc=proc, interval=0.25)
            assert seen[0] is None, "right after start the gauge has no sample"
            assert set(seen[:-1]) == {None} and seen[-1] == len(GARBAGE), f"never a false 0: {seen}"
            assert metric(scrape(port), "pulsar_ledger_deletion_estimated_inflight") == 0
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)
    finally:
        for pid in pids_serving(data_dir.absolute() / "broker" / "db"):
            stop_pid(pid)
