"""Every command that sends or consumes deletion requests checks the partition count.

A request sent to a partition the daemon does not read waits forever, and
``inflight`` does not count it either.  On a cluster the topic's partitioned
metadata is the truth; the embedded broker (pulsar-lite) keeps none, so a data
dir remembers the count it was first used with.  Both through the real CLI.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from deletion_service.cli.connections import check_partitions
from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from deletion_service.config import DEFAULT_TOPIC, DeletionConfig
from deletion_service.embedded.broker import EmbeddedBroker, stop_pid
from deletion_service.errors import UserError
from deletion_service.protocol.request import decode
from deletion_service.protocol.topics import DeletionTopics
from metastore import MetadataStore, open_store
from metastore.formats import Position, decode_managed_ledger, managed_ledger_path
from tests.support.cli_runner import run_cli
from tests.support.harness import PulsarLiteBroker, free_port

TOPIC = "persistent://t/ns/parts"
AS_FIRST_USED = ("--set", "twoPhaseDeletionLedgerDeletionParallelism=2")


def seed(store: MetadataStore) -> None:
    """Ledgers 1..3 of TOPIC, a cursor past ledger 2: trim has something to send."""
    w = ClusterWriter(store)
    w.ensure_layout()
    for lid in range(1, 4):
        w.bk_ledger(lid, pulsar_custom_metadata(TOPIC))
    w.managed_ledger(TOPIC, range(1, 4))
    w.cursor(TOPIC, "sub", Position(3, 0))


def listed(store: MetadataStore) -> list[int]:
    return decode_managed_ledger(store.get(managed_ledger_path(TOPIC)).data).ledger_ids()  # type: ignore[union-attr]


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "data"
    d.mkdir()
    with open_store(f"sqlite:///{d / 'metadata.db'}") as store:
        seed(store)
    yield d
    broker = EmbeddedBroker(d)  # one a command left behind, or the one this test started
    info = broker.read_info()
    if info is not None and broker.is_ours_and_alive(info):
        stop_pid(info.pid)


def requests_in(service_url: str, topics: list[str]) -> dict[str, list[int]]:
    """Ledger ids waiting on each topic, read at Earliest on a fresh subscription (nothing acked)."""
    client = pulsar.Client(service_url)
    try:
        out: dict[str, list[int]] = {}
        for topic in topics:
            consumer = client.subscribe(topic, f"peek-{uuid.uuid4().hex[:6]}",
                                        initial_position=pulsar.InitialPosition.Earliest)
            ids = []
            while True:
                try:
                    ids.append(decode(consumer.receive(timeout_millis=1000).data()).ledger_id)
                except pulsar.Timeout:
                    break
            consumer.close()
            out[topic] = ids
        return out
    finally:
        client.close()


EMBEDDED_COMMANDS = {
    "enqueue": ["enqueue", "--topic", TOPIC, "--ledger-id", "3"],  # 3 % 4 = partition 3: never read by the daemon
    "trim": ["trim", "--topic", TOPIC, "--offline"],
    "dlq-requeue": ["dlq", "requeue", "--all"],
    "inflight": ["inflight"],
    "run": ["run", "--exit-when-idle", "--max-wait", "5", "--admin-address", "127.0.0.1:{port}"],
    "demo": ["demo"],
}


def first_use_with_two_partitions(data_dir: Path) -> None:
    r = run_cli("enqueue", "--topic", TOPIC, "--ledger-id", "1", "--data-dir", str(data_dir), *AS_FIRST_USED)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("command", list(EMBEDDED_COMMANDS))
def test_each_command_refuses_a_data_dir_first_used_with_other_partitions(command: str, data_dir: Path) -> None:
    first_use_with_two_partitions(data_dir)
    argv = [a.format(port=free_port()) for a in EMBEDDED_COMMANDS[command]]
    run_cli(*argv, "--data-dir", str(data_dir), timeout=90).assert_one_line_error(  # the default parallelism, 4
        1, "first used with 2 partition(s)", "twoPhaseDeletionLedgerDeletionParallelism is 4",
        "set twoPhaseDeletionLedgerDeletionParallelism to 2")
    with open_store(f"sqlite:///{data_dir / 'metadata.db'}") as store:
        assert listed(store) == [1, 2, 3]  # trim forgot nothing; demo built nothing


def test_a_refused_request_reaches_no_partition_and_the_first_count_still_works(data_dir: Path) -> None:
    first_use_with_two_partitions(data_dir)
    d = ["--data-dir", str(data_dir)]
    run_cli(*EMBEDDED_COMMANDS["enqueue"], *d).assert_one_line_error(1, "first used with 2 partition(s)")
    broker = EmbeddedBroker(data_dir)
    info = broker.ensure()
    try:
        partitions = [f"{DEFAULT_TOPIC}-partition-{i}" for i in range(4)]
        assert requests_in(info.serviceUrl, partitions) == dict(zip(partitions, [[], [1], [], []], strict=True))
    finally:
        broker.stop()
    r = run_cli("trim", "--topic", TOPIC, "--offline", "--json", *d, *AS_FIRST_USED)
    assert r.returncode == 0 and '"removed": [1, 2]' in r.stdout, r.stderr


def test_an_unreadable_partition_record_is_refused_not_rewritten(data_dir: Path) -> None:
    record = EmbeddedBroker(data_dir).partitions_path
    record.parent.mkdir(parents=True)
    record.write_text("{not json")
    run_cli("enqueue", "--topic", TOPIC, "--ledger-id", "1", "--data-dir", str(data_dir)).assert_one_line_error(
        1, str(record), "partition count")
    assert record.read_text() == "{not json"


@pytest.mark.parametrize(
    "argv",
    [
        ["enqueue", "--topic", TOPIC, "--ledger-id", "3"],
        ["trim", "--topic", TOPIC, "--offline"],
        ["dlq", "requeue", "--all"],
        ["inflight"],
    ],
    ids=["enqueue", "trim", "dlq-requeue", "inflight"],
)
def test_against_an_external_pulsar_lite_every_command_says_the_count_is_not_checked(
    argv: list[str], zk_url: str, pulsar_broker: PulsarLiteBroker
) -> None:
    """pulsar-lite as a cluster broker keeps no partitioned-topic metadata (it says 0 for every topic):
    the partitions are plain topics by name, so commands go on (replicas run this way), each saying
    on stderr that the count cannot be checked and which count every process must use."""
    base = f"persistent://pulsar/system/__ld-{uuid.uuid4().hex[:10]}"
    with open_store(zk_url) as store:
        seed(store)
        opts = ["--metadata-store", zk_url, "--broker-url", pulsar_broker.service_url,
                "--set", f"ledgerDeletionTopic={base}"]
        r = run_cli(*argv, *opts)
        if argv == ["inflight"]:  # it goes on, to the backlog, which a cluster reads through its admin REST
            assert r.returncode == 1 and "needs --web-service-url" in r.stderr, r.stderr
        else:
            assert r.returncode == 0, r.stderr
        assert "keeps no partitioned-topic metadata" in r.stderr
        assert "twoPhaseDeletionLedgerDeletionParallelism = 4" in r.stderr
        assert "Traceback" not in r.stderr


class _ReportsPartitions:
    """A cluster broker that keeps partitioned-topic metadata.  A fake, because the only broker that
    runs here (pulsar-lite) keeps none: what it stands for is a real Pulsar's answer, nothing else."""

    def __init__(self, partitions: int) -> None:
        self._partitions = partitions

    def partitions(self, topic: str) -> int:
        return self._partitions

    def keeps_partition_metadata(self) -> bool:
        return True


@pytest.mark.parametrize(("found", "words"), [
    (0, "pulsar-admin topics create-partitioned-topic"),
    (2, "pulsar-admin topics update-partitioned-topic"),
    (8, "partitions cannot be removed: set the parallelism to 8"),
])
def test_a_cluster_whose_topic_has_another_partition_count_is_refused(found: int, words: str) -> None:
    topics = DeletionTopics.from_config(DeletionConfig())
    warned: list[str] = []
    with pytest.raises(UserError) as refused:
        check_partitions(topics, _ReportsPartitions(found), warned.append)  # type: ignore[arg-type]
    assert words in str(refused.value) and not warned
    check_partitions(topics, _ReportsPartitions(topics.partitions), warned.append)  # type: ignore[arg-type]
    assert not warned
