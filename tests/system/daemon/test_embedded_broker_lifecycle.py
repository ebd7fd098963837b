"""The embedded broker's lifecycle with real processes: one daemon per data dir, no leaked or
doubled brokers after SIGKILLs, and a daemon that restarts its killed broker (or exits loudly)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from deletion_service.broker.subscription_stats import parse_metrics
from deletion_service.embedded.broker import EmbeddedBroker, alive, pids_serving, stop_pid
from tests.support.cli_runner import run_cli
from tests.support.daemon_ledgers import present, request_file, seed
from tests.support.daemon_process import answers, start_daemon
from tests.support.harness import free_port, unread_bytes, wait_until
from tests.support.metrics_scrape import metric, scrape

#: The Pulsar client's acknowledgment grouping time (its default, 100 ms), which the daemon keeps.
ACK_GROUP_S = 0.1


@pytest.fixture
def data_dir(tmp_path: Path):  # noqa: ANN201
    d = tmp_path / "data"
    yield d
    for pid in pids_serving(d.absolute() / "broker" / "db"):  # whatever a failed test left: ours to stop
        stop_pid(pid)


def _daemon_up(data_dir: Path, *extra: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = start_daemon(data_dir, *extra, port=port)
    wait_until(lambda: answers(f"http://127.0.0.1:{port}/healthz"), 60, "the daemon's admin API", proc=proc)
    # subscribed: run notes its subscriptions once its consumers are up (the API answers before that)
    wait_until(lambda: (data_dir / "broker" / "subscriptions.json").exists(), 60, "the daemon's consumers",
               proc=proc)
    return proc, port


class _Unchanged:
    """True once ``read()`` has returned the same value, above ``floor``, for ``still_s`` seconds."""

    def __init__(self, read: Callable[[], int], floor: int, still_s: float) -> None:
        self.read, self.floor, self.still_s = read, floor, still_s
        self.last, self.since = floor, time.monotonic()

    def __call__(self) -> bool:
        value = self.read()
        if value != self.last:
            self.last, self.since = value, time.monotonic()
        return value > self.floor and time.monotonic() - self.since >= self.still_s


def _handed_out(metrics_url: str) -> int:
    """Requests the broker has handed to the daemon's consumers and not seen acknowledged (its metrics)."""
    with urllib.request.urlopen(metrics_url, timeout=5) as r:
        stats = parse_metrics(r.read().decode(), "ledger-deletion")
    return sum(s.unacked or 0 for s in stats.values())


def _stop(proc: subprocess.Popen) -> tuple[str, str]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.communicate(timeout=60)


def test_a_second_daemon_on_the_same_data_dir_is_refused_naming_the_first(data_dir: Path) -> None:
    first, _ = _daemon_up(data_dir)
    try:
        broker = EmbeddedBroker(data_dir).read_info()
        r = run_cli("run", "--data-dir", str(data_dir), "--admin-address", f"127.0.0.1:{free_port()}", timeout=60)
        r.assert_one_line_error(1, f"pid {first.pid}", "already runs on data dir", "--data-dir")
        assert broker is not None and alive(broker.pid), "the refused daemon left the first one's broker alone"
        assert first.poll() is None
        demo = run_cli("demo", "--data-dir", str(data_dir), timeout=60)
        demo.assert_one_line_error(1, f"pid {first.pid}")
    finally:
        _, err = _stop(first)
    assert first.returncode == 0, err


def test_a_broker_a_killed_daemon_left_is_found_without_broker_json(data_dir: Path) -> None:
    proc, _ = _daemon_up(data_dir)
    db = data_dir.absolute() / "broker" / "db"
    [leftover] = pids_serving(db)
    proc.kill()
    proc.wait(10)
    (data_dir / "broker" / "broker.json").unlink()  # as if killed before it was written
    assert pids_serving(db) == [leftover], "the broker outlives a SIGKILLed daemon"
    r = run_cli("run", "--exit-when-idle", "--max-wait", "30", "--data-dir", str(data_dir),
                "--admin-address", f"127.0.0.1:{free_port()}", timeout=90)
    assert r.returncode == 0, r.stderr
    assert not alive(leftover) and pids_serving(db) == []  # replaced, then stopped: nothing doubled or leaked


def test_the_daemon_restarts_its_killed_broker_and_keeps_deleting(data_dir: Path, tmp_path: Path) -> None:
    data_dir.mkdir()
    url = f"sqlite:///{data_dir / 'metadata.db'}"
    ids = range(1, 21)
    seed(url, ids)
    proc, port = _daemon_up(data_dir)
    db = data_dir.absolute() / "broker" / "db"
    try:
        old = EmbeddedBroker(data_dir).read_info()
        assert old is not None
        os.kill(old.pid, signal.SIGKILL)
        broker = EmbeddedBroker(data_dir)
        wait_until(lambda: (i := broker.read_info()) is not None and i.pid != old.pid and alive(i.pid), 60,
                   "the daemon to restart its broker", proc=proc)
        new = broker.read_info()
        assert new is not None and new.serviceUrl == old.serviceUrl  # same URL: the client reconnects
        assert answers(f"http://127.0.0.1:{port}/healthz")
        r = run_cli("enqueue", "--from-file", str(request_file(tmp_path / "r.jsonl", ids)),
                    "--data-dir", str(data_dir), timeout=60)
        assert r.returncode == 0, r.stderr
        assert pids_serving(db) == [new.pid], "enqueue used the restarted broker, never a second one"
        wait_until(lambda: present(url, ids) == [], 60, "the daemon to delete after the restart", proc=proc)
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert metric(metrics, 'pulsar_ledger_deletion_acked_total{outcome="reconsumed"}') == 0  # no retry spent
        assert metric(metrics, 'pulsar_ledger_deletion_acked_total{outcome="dlq"}') == 0
    except BaseException:
        print(_stop(proc)[1])  # the daemon's log: why it did not come back
        raise
    _, err = _stop(proc)
    assert "embedded broker" in err and "restarting it" in err
    assert proc.returncode == 0, err


def test_a_broker_that_cannot_come_back_makes_the_daemon_exit_with_an_error(data_dir: Path) -> None:
    """The broker's database is swapped for a plain file while it runs (a fault the real broker cannot
    produce on its own: a broken disk), so every restart fails: the daemon must not linger half alive."""
    proc, _ = _daemon_up(data_dir)
    info = EmbeddedBroker(data_dir).read_info()
    assert info is not None
    database = data_dir / "broker" / "db.rocksdb"
    try:
        database.rename(data_dir / "broker" / "db.rocksdb.moved")  # the running broker keeps its open files
        database.write_text("not a database")
        os.kill(info.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    assert "exiting so that this daemon's supervisor restarts it" in err
    assert "Traceback" not in err


def test_acks_a_killed_broker_never_persisted_are_not_settled_twice(
        data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Acks the client sent into a broker that then died are lost, and the broker redelivers the
    messages.  They were settled: they are acknowledged again, not counted (or audited) a second time."""
    data_dir.mkdir()
    url = f"sqlite:///{data_dir / 'metadata.db'}"
    ids = range(1, 21)
    seed(url, ids)
    # the first ack waits until the broker is frozen, so every ack goes into a socket nobody reads
    # (a fixed sleep was a race on a loaded machine: acks taken by the live broker are never redelivered)
    go = tmp_path / "broker-frozen"
    monkeypatch.setenv("LEDGER_DELETION_FAILPOINTS", f"delete.before-ack=wait-for:{go}")
    proc, port = _daemon_up(data_dir)
    monkeypatch.delenv("LEDGER_DELETION_FAILPOINTS")
    try:
        r = run_cli("enqueue", "--from-file", str(request_file(tmp_path / "r.jsonl", ids)),
                    "--data-dir", str(data_dir), timeout=60)
        assert r.returncode == 0, r.stderr
        old = EmbeddedBroker(data_dir).read_info()
        assert old is not None
        # Not "every ledger deleted" first: the first batch waits at its first ack and may hold only some
        # of the 20 (a batch ends at the first gap in arrivals), the next waiting behind it.  The broker
        # is frozen once it has handed all 20 to the daemon (no ack can have reached it: the first waits
        # for the freeze); then every one is deleted from what the client holds, and acked into it.
        wait_until(lambda: _handed_out(old.metricsUrl) == len(ids), 60,
                   "the broker to hand every request to the daemon", proc=proc, interval=0.5)
        os.kill(old.pid, signal.SIGSTOP)
        unread_at_freeze = unread_bytes(old.pid)
        go.touch()
        deleted = 'pulsar_ledger_deletion_acked_total{outcome="deleted"}'
        wait_until(lambda: metric(scrape(port), deleted) == 20, 60, "the daemon to ack into the frozen broker",
                   proc=proc)
        # acked means handed to the client, which groups acks for up to ACK_GROUP_S before it writes them:
        # wait until they are in the frozen broker's socket (its unread bytes grew, and stay put)
        wait_until(_Unchanged(lambda: unread_bytes(old.pid), unread_at_freeze, 2 * ACK_GROUP_S), 30,
                   "the acks to reach the frozen broker's socket", proc=proc)
        os.kill(old.pid, signal.SIGKILL)
        wait_until(lambda: (metric(scrape(port), "pulsar_ledger_deletion_received_total") or 0) >= 40, 90,
                   "the restarted broker to redeliver the messages whose acks it lost", proc=proc)
        wait_until(lambda: metric(scrape(port), "pulsar_ledger_deletion_ack_lost_total") == 20, 30,
                   "the redelivered messages to be acknowledged again", proc=proc)
        assert metric(scrape(port), deleted) == 20
        assert metric(scrape(port), 'pulsar_ledger_deletion_acked_total{outcome="absent"}') == 0
        assert metric(scrape(port), 'pulsar_ledger_deletion_acked_total{outcome="reconsumed"}') == 0
    except BaseException:
        print(_stop(proc)[1])
        raise
    _, err = _stop(proc)
    assert proc.returncode == 0, err
    audited = run_cli("audit", "--json", "--data-dir", str(data_dir), timeout=60)
    assert audited.returncode == 0, audited.stderr
    records = json.loads(audited.stdout)
    assert sorted(r["request"]["ledgerId"] for r in records) == list(ids)  # one record each, none twice
    # and the broker took the second acks: a later run finds nothing to redeliver
    again = run_cli("run", "--exit-when-idle", "--max-wait", "30", "--data-dir", str(data_dir),
                    "--admin-address", f"127.0.0.1:{free_port()}", timeout=90)
    assert again.returncode == 0, again.stderr
    assert ": absent" not in again.stderr, again.stderr  # a redelivered request would settle as absent
