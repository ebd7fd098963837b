"""The daemon through the real CLI: enqueue → run --exit-when-idle, SIGTERM, SIGKILL, operator mistakes."""

from __future__ import annotations

import json
import signal
import time
import urllib.request
from pathlib import Path

import pytest

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from deletion_service.embedded.broker import EmbeddedBroker, alive
from metastore import open_store
from tests.support.cli_runner import run_cli
from tests.support.daemon_ledgers import TOPIC, present, request_file, seed
from tests.support.daemon_process import answers, data_dir, start_daemon
from tests.support.harness import free_port, wait_until
from tests.support.metrics_scrape import metric

__all__ = ["data_dir"]  # the fixture: it stops a broker left behind


@pytest.mark.parametrize("backend", ["sqlite", "zookeeper"])
def test_enqueue_then_run_until_idle(backend: str, data_dir: Path, tmp_path: Path, request) -> None:  # noqa: ANN001
    if backend == "sqlite":
        data_dir.mkdir()
        url, store_opts = f"sqlite:///{data_dir / 'metadata.db'}", []
    else:
        url = request.getfixturevalue("zk_url")
        store_opts = ["--metadata-store", url]
    seed(url, range(1, 41), forged=range(100, 105))
    common = ["--data-dir", str(data_dir), *store_opts]
    r = run_cli("enqueue", "--from-file", str(request_file(tmp_path / "r.jsonl", range(1, 41))), "--json", *common)
    assert r.returncode == 0 and json.loads(r.stdout)["sent"] == 40, r.stderr
    r = run_cli("enqueue", "--from-file", str(request_file(tmp_path / "f.jsonl", range(100, 105))), *common)
    assert r.returncode == 0, r.stderr
    r = run_cli(
        "run",
        "--exit-when-idle",
        "--max-wait",
        "60",
        "--admin-address",
        f"127.0.0.1:{free_port()}",
        *common,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert present(url, range(1, 41)) == []
    assert present(url, range(100, 105)) == list(range(100, 105))  # forged: never deleted
    assert "metadata_mismatch" in r.stderr and "Traceback" not in r.stderr


def test_run_exits_3_when_not_idle_in_time(data_dir: Path, tmp_path: Path) -> None:
    data_dir.mkdir()
    url = f"sqlite:///{data_dir / 'metadata.db'}"
    with open_store(url) as store:
        w = ClusterWriter(store)
        w.ensure_layout()
        w.managed_ledger(TOPIC, [])  # exists and records nothing newer: nothing proves 7 superseded
        w.bk_ledger(7, pulsar_custom_metadata(TOPIC), ctime_ms=int(time.time() * 1000))  # young
    f = tmp_path / "young.jsonl"
    f.write_text(
        json.dumps(
            {
                "topicName": TOPIC,
                "ledgerComponent": "MANAGED_LEDGER",
                "ledgerType": "LEDGER",
                "ledgerId": 7,
                "reason": "orphan",
            }
        )
        + "\n"
    )
    assert run_cli("enqueue", "--from-file", str(f), "--data-dir", str(data_dir)).returncode == 0
    r = run_cli(
        "run",
        "--exit-when-idle",
        "--max-wait",
        "8",
        "--data-dir",
        str(data_dir),
        "--admin-address",
        f"127.0.0.1:{free_port()}",
        timeout=60,
    )
    assert r.returncode == 3, r.stderr
    assert "waiting out retry delays: 1 not yet due (not-yet 1 until " in r.stderr  # why, and until when
    assert present(url, range(7, 8)) == [7]


def test_sigterm_mid_batch_loses_nothing(data_dir: Path, tmp_path: Path) -> None:
    data_dir.mkdir()
    url = f"sqlite:///{data_dir / 'metadata.db'}"
    ids = range(1, 301)
    seed(url, ids)
    cfg = tmp_path / "slow.toml"
    cfg.write_text("maxDeletionsPerSecond = 40\n")  # slow enough to stop it half way
    assert (
        run_cli(
            "enqueue", "--from-file", str(request_file(tmp_path / "r.jsonl", ids)), "--data-dir", str(data_dir)
        ).returncode
        == 0
    )
    proc = start_daemon(data_dir, "--config", str(cfg))
    wait_until(lambda: len(present(url, ids)) < 250, 60, "some deletions")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    left = present(url, ids)
    assert 0 < len(left) < 300, "stopped half way"
    assert "stopping: finishing the batch in hand" in err
    # The next run picks up every request that was not finished.
    r = run_cli(
        "run",
        "--exit-when-idle",
        "--max-wait",
        "60",
        "--data-dir",
        str(data_dir),
        "--admin-address",
        f"127.0.0.1:{free_port()}",
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert present(url, ids) == []


def test_a_killed_daemons_broker_is_found_and_replaced(data_dir: Path) -> None:
    port = free_port()
    proc = start_daemon(data_dir, port=port)
    broker = EmbeddedBroker(data_dir)
    wait_until(lambda: broker.read_info() is not None, 30, "broker.json")
    old = broker.read_info()
    assert old is not None
    # Killed while running, not while starting: the admin API answers once the daemon is up.
    wait_until(lambda: answers(f"http://127.0.0.1:{port}/healthz"), 30, "the admin API", proc=proc)
    proc.kill()
    proc.wait(10)
    assert broker.is_ours_and_alive(old), "the broker outlives a SIGKILLed daemon"
    r = run_cli(
        "run",
        "--exit-when-idle",
        "--max-wait",
        "30",
        "--data-dir",
        str(data_dir),
        "--admin-address",
        f"127.0.0.1:{free_port()}",
        timeout=90,
    )
    assert r.returncode == 0, r.stderr
    wait_until(lambda: not alive(old.pid), 10, "the old broker to go")
    assert broker.read_info() is None  # the new run stopped the broker it started


@pytest.mark.parametrize(
    "args,code,fragments",
    [
        (["--metadata-store", "zk://127.0.0.1:{port}"], 1, ["cannot connect to ZooKeeper"]),
        (["--metadata-store", "zk:/oops"], 2, ["invalid host:port"]),
        (["--metadata-store", "oops"], 2, ["no scheme"]),
        (["--broker-url", "pulsar://127.0.0.1:{port}", "--metadata-store", "sqlite:///{tmp}/m.db"], 1, ["127.0.0.1:"]),
    ],
)
def test_operator_mistakes(args: list[str], code: int, fragments: list[str], tmp_path: Path) -> None:
    port = free_port()
    args = [a.format(port=port, tmp=tmp_path) for a in args]
    seed(f"sqlite:///{tmp_path}/m.db", range(0))  # a store with a ledger layout: only the broker is missing
    run_cli("run", "--data-dir", str(tmp_path / "d"), *args, timeout=90).assert_one_line_error(code, *fragments)


def test_bad_config_key(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("twoPhaseDeletionMaxRetryDeletCount = 3\n")
    run_cli("run", "--config", str(cfg), "--data-dir", str(tmp_path / "d")).assert_one_line_error(
        1, "unknown config key 'twoPhaseDeletionMaxRetryDeletCount'", str(cfg)
    )
    cfg.write_text("twoPhaseDeletionMaxRetryDeleteCount = -3\n")
    run_cli("config", "show", "--config", str(cfg)).assert_one_line_error(1, "twoPhaseDeletionMaxRetryDeleteCount")


def test_config_show_precedence_and_masking(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('twoPhaseDeletionMaxRetryDeleteCount = 3\nminLedgerAgeSeconds = 60\nadminTokenFile = "/etc/tok"\n')
    env = {"LEDGER_DELETION_MIN_LEDGER_AGE_SECONDS": "120", "LEDGER_DELETION_ADMIN_TOKEN": "s3cr3t-token"}
    r = run_cli("config", "show", "--config", str(cfg), "--json", env=env)
    assert r.returncode == 0, r.stderr
    shown = {k: v["value"] for k, v in json.loads(r.stdout).items()}  # each value with its source
    assert shown["twoPhaseDeletionMaxRetryDeleteCount"] == 3  # file over default
    assert shown["minLedgerAgeSeconds"] == 120  # env over file
    assert shown["twoPhaseDeletionReconsumeLaterInSeconds"] == 600  # default
    assert "s3cr3t-token" not in r.stdout and shown["LEDGER_DELETION_ADMIN_TOKEN"] == "****"
    people = run_cli("config", "show", "--config", str(cfg), env={**env, "COLUMNS": "250"})
    assert "env LEDGER_DELETION_MIN_LEDGER_AGE_SECONDS" in people.stdout and "s3cr3t" not in people.stdout
    flagged = run_cli("config", "show", "--config", str(cfg), "--json", "--set", "minLedgerAgeSeconds=30", env=env)
    assert json.loads(flagged.stdout)["minLedgerAgeSeconds"] == {"value": 30, "source": "--set"}  # flag over env
    run_cli("config", "show", "--set", "noSuchKey=1").assert_one_line_error(1, "unknown config key 'noSuchKey'")
    run_cli("config", "show", "--set", "novalue").assert_one_line_error(2, "KEY=VALUE")


def test_metrics_and_inflight_answer_while_running(data_dir: Path, tmp_path: Path) -> None:
    data_dir.mkdir()
    seed(f"sqlite:///{data_dir / 'metadata.db'}", range(1, 4))
    assert (
        run_cli(
            "enqueue", "--from-file", str(request_file(tmp_path / "r.jsonl", range(1, 4))), "--data-dir", str(data_dir)
        ).returncode
        == 0
    )
    port = free_port()
    proc = start_daemon(data_dir, port=port)
    base = f"http://127.0.0.1:{port}"

    def get(path: str) -> str:
        with urllib.request.urlopen(base + path, timeout=5) as r:
            return r.read().decode()

    try:
        wait_until(lambda: answers(base + "/healthz"), 30, "the admin API")
        deleted = 'pulsar_ledger_deletion_acked_total{outcome="deleted"}'
        wait_until(lambda: metric(get("/metrics"), deleted) == 3, 30, "three deletions on /metrics")
        metrics = get("/metrics")
        assert metric(metrics, 'pulsar_ledger_deletion_deleted_total{type="LEDGER"}') == 3
        # the backlog gauges have a sample once the broker's statistics were refreshed after start
        wait_until(lambda: "pulsar_ledger_deletion_estimated_inflight" in get("/metrics"), 30, "the in-flight gauge")
        assert isinstance(json.loads(get("/admin/v2/broker-stats/estimated-inflight-deletion-ledger-count")), int)
        # Another command reuses the daemon's broker instead of starting a second one on the same data.
        owner = EmbeddedBroker(data_dir).read_info()
        with open_store(f"sqlite:///{data_dir / 'metadata.db'}") as store:  # old enough for a manual request
            ClusterWriter(store).bk_ledger(
                4, pulsar_custom_metadata(TOPIC), ctime_ms=int(time.time() * 1000) - 2 * 86_400_000
            )
        r = run_cli("enqueue", "--topic", TOPIC, "--ledger-id", "4", "--allow-missing-topic",  # a gone topic's
                    "--data-dir", str(data_dir))
        assert r.returncode == 0, r.stderr
        assert EmbeddedBroker(data_dir).read_info() == owner
        wait_until(
            lambda: metric(get("/metrics"), 'pulsar_ledger_deletion_deleted_total{type="LEDGER"}') == 4,
            30,
            "the daemon to delete the enqueued ledger",
        )
        # A second daemon on the same admin port: one clear line, exit 1.
        run_cli(
            "run", "--data-dir", str(tmp_path / "other"), "--admin-address", f"127.0.0.1:{port}", timeout=60
        ).assert_one_line_error(1, f"127.0.0.1:{port} is already in use")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert proc.returncode == 0


@pytest.mark.parametrize(
    "layout,fragment",
    [
        (b"2\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory:1\n", "FlatLedgerManagerFactory"),
        (None, "no LAYOUT node under '/ledgers'"),
    ],
)
def test_unknown_or_missing_ledger_layout_is_refused(
    zk_url: str, tmp_path: Path, layout: bytes | None, fragment: str
) -> None:
    """A wrong ledger path plus "absent = success" would silently leave orphans: refuse to start."""
    with open_store(zk_url) as store:
        if layout is not None:
            store.put("/ledgers/LAYOUT", layout, -1)
        else:
            store.put("/ledgers/00/0000/L0001", b"", -1)
    run_cli(
        "run",
        "--metadata-store",
        zk_url,
        "--data-dir",
        str(tmp_path / "d"),
        "--admin-address",
        f"127.0.0.1:{free_port()}",
    ).assert_one_line_error(1, "ledger layout", fragment)
