"""SIGTERM while RETRY publishes hang on a frozen broker: the daemon stops well inside Kubernetes'
30 s grace period, and a later run settles every request (nothing lost)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from deletion_service.embedded.broker import EmbeddedBroker, alive, pids_serving
from metastore import ANY, open_store
from metastore.formats import ledger_path
from tests.cli_runner import run_cli
from tests.harness import free_port, wait_until
from tests.test_daemon_cli import TOPIC, _start_daemon, present, request_file

#: Kubernetes' default terminationGracePeriodSeconds.
GRACE_S = 30


def _ledgers(url: str, ids: range, state: str) -> None:
    with open_store(url) as store:
        writer = ClusterWriter(store)
        writer.ensure_layout()
        for lid in ids:
            path = ledger_path("/ledgers", lid, "hierarchical")
            if store.get(path) is not None:
                store.delete(path, ANY)
            writer.bk_ledger(lid, pulsar_custom_metadata(TOPIC), state=state)


def test_sigterm_with_retry_publishes_hanging_stops_in_time_and_loses_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    url = f"sqlite:///{data_dir / 'metadata.db'}"
    ids = range(1, 201)
    _ledgers(url, ids, "OPEN")  # still open: every request is reconsumed, i.e. published to RETRY
    assert run_cli("enqueue", "--from-file", str(request_file(tmp_path / "r.jsonl", ids)),
                   "--data-dir", str(data_dir)).returncode == 0
    cfg = tmp_path / "c.toml"
    cfg.write_text("twoPhaseDeletionReconsumeLaterInSeconds = 1\n")
    proc = _start_daemon(data_dir, "--config", str(cfg))
    broker = None
    try:
        wait_until(lambda: (data_dir / "broker" / "subscriptions.json").exists(), 60, "the daemon's consumers",
                   proc=proc)
        broker = EmbeddedBroker(data_dir).read_info()
        assert broker is not None
        time.sleep(0.3)  # the broker pushes the requests to the consumer's queue
        os.kill(broker.pid, signal.SIGSTOP)  # frozen, not dead: sends and acks just hang
        time.sleep(2)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=GRACE_S)
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

    _ledgers(url, ids, "CLOSED")  # now deletable: a run must find every request again
    r = run_cli("run", "--exit-when-idle", "--max-wait", "120", "--data-dir", str(data_dir), "--config", str(cfg),
                "--admin-address", f"127.0.0.1:{free_port()}", timeout=180)
    assert r.returncode == 0, r.stderr
    assert present(url, ids) == [], "every request was still there to settle"
    assert broker is not None and not alive(broker.pid), "the frozen broker was stopped with its daemon"
    assert pids_serving(data_dir.absolute() / "broker" / "db") == [], "no broker leaked"
