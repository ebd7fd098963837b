"""``trim`` and ``enqueue`` through the real CLI, including SIGKILL at the protocol's two crash points."""

from __future__ import annotations

import json
import signal
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pulsar
import pytest

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from deletion_service.embedded.broker import EmbeddedBroker
from deletion_service.failpoints import ENV as FAILPOINTS
from deletion_service.protocol.request import decode
from metastore import ABSENT, MetadataStore, open_store
from metastore.formats import Position, decode_managed_ledger, managed_ledger_path
from tests.support.cli_runner import run_cli
from tests.support.deletion_world import make_world

TOPIC = "persistent://t/ns/crash"


@dataclass
class Setup:
    store: MetadataStore
    common: list[str]  # the CLI's options: ZooKeeper, the data dir of the embedded broker, the config
    broker_url: str


@pytest.fixture
def setup(zk_url: str, tmp_path: Path) -> Iterator[Setup]:
    """Real ZooKeeper and the embedded broker of a data dir, started here and reused by every CLI
    call (as a running daemon's would be).  Not ``--broker-url``: pulsar-lite keeps no
    partitioned-topic metadata, so the cluster-mode partition check refuses it (as it should)."""
    base = f"persistent://pulsar/system/__ld-{uuid.uuid4().hex[:10]}"
    cfg = tmp_path / "ld.toml"
    cfg.write_text(f'ledgerDeletionTopic = "{base}"\ntwoPhaseDeletionLedgerDeletionParallelism = 2\n')
    data_dir = tmp_path / "data"
    broker = EmbeddedBroker(data_dir)
    info = broker.ensure()
    try:
        with open_store(zk_url) as store:
            w = ClusterWriter(store)
            w.ensure_layout()
            for lid in range(1, 9):
                w.bk_ledger(lid, pulsar_custom_metadata(TOPIC))
            w.managed_ledger(TOPIC, range(1, 9))
            w.cursor(TOPIC, "sub", Position(6, 0))
            yield Setup(store, ["--metadata-store", zk_url, "--data-dir", str(data_dir), "--config", str(cfg)],
                        info.serviceUrl)
    finally:
        broker.stop()


def requests_on(common: list[str], broker_url: str) -> list:
    """Every request sitting in the deletion topic's partitions (read without acking)."""
    base = common[common.index("--config") + 1]
    topic = Path(base).read_text().split('"')[1]
    client = pulsar.Client(broker_url)
    try:
        consumer = client.subscribe(
            [f"{topic}-partition-{i}" for i in range(2)],
            f"peek-{uuid.uuid4().hex[:6]}",
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        out = []
        while True:
            try:
                out.append(decode(consumer.receive(timeout_millis=1500).data()))
            except pulsar.Timeout:
                return out
    finally:
        client.close()


def listed(store: MetadataStore) -> list[int]:
    return decode_managed_ledger(store.get(managed_ledger_path(TOPIC)).data).ledger_ids()  # type: ignore[union-attr]


def test_trim_json_and_dry_run(setup: Setup) -> None:
    store, common = setup.store, setup.common
    r = run_cli("trim", "--topic", TOPIC, "--dry-run", "--json", *common)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {
        "topic": TOPIC,
        "picked": [1, 2, 3, 4, 5],
        "removed": [],
        "metadataWrites": 0,
        "aborted": None,
        "kept": [],
        "dryRun": True,
    }
    assert listed(store) == list(range(1, 9))
    r = run_cli("trim", "--topic", TOPIC, "--json", *common)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["removed"], out["metadataWrites"], out["aborted"]) == ([1, 2, 3, 4, 5], 1, None)
    assert listed(store) == [6, 7, 8]
    assert sorted(q.ledger_id for q in requests_on(common, setup.broker_url)) == [1, 2, 3, 4, 5]
    people = run_cli("trim", "--topic", TOPIC, *common)
    assert people.returncode == 0 and "no ledger lies wholly below" in people.stdout


def test_trim_refuses_an_owned_topic(setup: Setup) -> None:
    store, common = setup.store, setup.common
    store.put("/namespace/t/ns/0x00000000_0x40000000", b"{}", ABSENT)
    run_cli("trim", "--topic", TOPIC, *common).assert_one_line_error(1, "owned by a broker", "--offline")
    assert listed(store) == list(range(1, 9))
    assert run_cli("trim", "--topic", TOPIC, "--offline", *common).returncode == 0


def test_enqueue_single_and_file(setup: Setup, tmp_path: Path) -> None:
    common = setup.common
    r = run_cli("enqueue", "--topic", TOPIC, "--ledger-id", "42", "--json", *common)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["sent"] == 1 and len(json.loads(r.stdout)["messageIds"]) == 1
    lines = [
        json.dumps(
            {
                "topicName": TOPIC,
                "ledgerComponent": "MANAGED_CURSOR",
                "cursorName": "c",
                "ledgerType": "LEDGER",
                "ledgerId": 100 + i,
                "reason": "orphan",
            }
        )
        for i in range(30)
    ]
    f = tmp_path / "requests.jsonl"
    f.write_text("\n".join(lines) + "\n\n")
    r = run_cli("enqueue", "--from-file", str(f), "--json", *common)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["sent"] == 30
    got = requests_on(common, setup.broker_url)
    assert sorted(q.ledger_id for q in got) == [42, *range(100, 130)]
    assert Counter(q.reason.value for q in got) == {"manual": 1, "orphan": 30}


@pytest.mark.parametrize(
    "bad,fragment",
    [
        ("{broken", "not JSON"),
        (
            json.dumps(
                {"topicName": TOPIC, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "OFFLOAD_LEDGER", "ledgerId": 1}
            ),
            "offloadContext is required",
        ),
    ],
)
def test_a_bad_line_rejects_the_file_before_sending(
    setup: Setup,
    tmp_path: Path,
    bad: str,
    fragment: str,
) -> None:
    common = setup.common
    good = json.dumps({"topicName": TOPIC, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER", "ledgerId": 5})
    f = tmp_path / "requests.jsonl"
    f.write_text("\n".join([good] * 6 + [bad] + [good]) + "\n")
    run_cli("enqueue", "--from-file", str(f), *common).assert_one_line_error(1, f"{f}:7:", fragment, "nothing was sent")
    assert requests_on(common, setup.broker_url) == []


def _phase_two(store: MetadataStore, common: list[str], broker_url: str, resend: list | None = None) -> Counter:
    base = Path(common[common.index("--config") + 1]).read_text().split('"')[1]
    # No in-use grace: these tests ask what phase two does once the grace is over.
    world = make_world(store, store, broker_url, ledgerDeletionTopic=base, twoPhaseDeletionLedgerDeletionParallelism=2,
                       twoPhaseDeletionInUseGraceSeconds=0)
    world.start()
    try:
        for r in resend or []:
            world.service.send_pending_delete(r)
        world.drain(lambda w: sum(w.outcomes().values()) >= 5 + len(resend or []), timeout_s=60)
        return world.outcomes()
    finally:
        world.service.close()
        world.service.broker.close()


def test_crash_after_send_before_write_keeps_the_ledgers(setup: Setup) -> None:
    store, common = setup.store, setup.common
    r = run_cli("trim", "--topic", TOPIC, *common, env={FAILPOINTS: "trim.after-receipts=kill"})
    assert r.returncode == -signal.SIGKILL
    assert listed(store) == list(range(1, 9))  # the write never happened
    outcomes = _phase_two(store, common, setup.broker_url)
    assert outcomes == {"still_in_use": 5}
    assert all(store.get(f"/ledgers/00/0000/L000{lid}") is not None for lid in range(1, 9))


def test_crash_after_write_deletes_exactly_once(setup: Setup) -> None:
    store, common = setup.store, setup.common
    r = run_cli("trim", "--topic", TOPIC, *common, env={FAILPOINTS: "trim.after-write=kill"})
    assert r.returncode == -signal.SIGKILL
    assert listed(store) == [6, 7, 8]
    sent = requests_on(common, setup.broker_url)
    # Phase two after the restart, with every request delivered twice.
    outcomes = _phase_two(store, common, setup.broker_url, resend=sent)
    assert outcomes["deleted"] == 5 and outcomes["absent"] == 5 and sum(outcomes.values()) == 10, outcomes
    assert [lid for lid in range(1, 9) if store.get(f"/ledgers/00/0000/L000{lid}") is not None] == [6, 7, 8]
