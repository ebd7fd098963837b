"""Namespace scope on real ZooKeeper and a real pulsar-lite: two tenants, each with its own daemon
restricted to its namespace; a forged cross-namespace request deletes nothing; a switch of scope with
requests in flight loses none."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pulsar
import pytest

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from metastore import open_store
from metastore.formats import ledger_path
from tests.support.cli_runner import run_cli
from tests.support.harness import PulsarLiteBroker, free_port, wait_until

ACME = "persistent://acme/orders/payments"
GLOBEX = "persistent://globex/events/clicks"
OWN = {ACME: range(1, 6), GLOBEX: range(11, 16)}
FORGED = 16  # globex's ledger, asked for on acme's topic


@pytest.fixture
def cluster(zookeeper, tmp_path: Path):  # noqa: ANN001, ANN201 - a chroot of its own on the session's ZooKeeper
    url = f"{zookeeper.url}/tenancy-{uuid.uuid4().hex[:8]}"
    with open_store(url) as store:
        writer = ClusterWriter(store)
        writer.ensure_layout()
        for i, (topic, ids) in enumerate(OWN.items()):
            writer.managed_ledger(topic, [1000 + i])  # its current ledger: the young ones below were trimmed
            for lid in ids:
                writer.bk_ledger(lid, pulsar_custom_metadata(topic))
        writer.bk_ledger(FORGED, pulsar_custom_metadata(GLOBEX))
    cfg = tmp_path / "namespace-scope.toml"
    cfg.write_text(f'ledgerDeletionTopicScope = "namespace"\nledgerDeletionTopic = '
                   f'"persistent://pulsar/system/__ld-{uuid.uuid4().hex[:8]}"\n')
    return url, cfg


def _present(url: str, ids) -> list[int]:  # noqa: ANN001
    with open_store(url) as store:
        return [lid for lid in ids if store.get(ledger_path("/ledgers", lid, "hierarchical")) is not None]


def _requests(path: Path, topic: str, ids) -> Path:  # noqa: ANN001
    path.write_text("".join(json.dumps({"topicName": topic, "ledgerComponent": "MANAGED_LEDGER",
                                        "ledgerType": "LEDGER", "ledgerId": lid, "reason": "trim"}) + "\n"
                            for lid in ids))
    return path


def _daemon(common: list[str], *extra: str, port: int | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "deletion_service.cli.main", *common, "run", "--log-format",
                             "json", "--admin-address", f"127.0.0.1:{port or free_port()}", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _deleted_by(stderr: str) -> set[int]:
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    return {lid for x in lines if x.get("outcome") == "deleted" for lid in x["ledgers"]}  # one line per batch


def _dlq(service_url: str, namespace: str) -> list[pulsar.Message]:
    client = pulsar.Client(service_url)
    try:
        reader = client.create_reader(f"persistent://{namespace}/__ledger_deletion-DLQ", pulsar.MessageId.earliest)
        out = []
        try:
            while reader.has_message_available():
                out.append(reader.read_next(timeout_millis=5000))
        except pulsar.PulsarException as e:  # pulsar-lite: "Topic has no messages" for an empty topic
            assert "no messages" in str(e) or not out, e
        return out
    finally:
        client.close()


def test_two_tenants_each_delete_only_their_own_and_a_forged_request_is_dead_lettered(
        cluster, pulsar_broker: PulsarLiteBroker, tmp_path: Path) -> None:  # noqa: ANN001
    url, cfg = cluster
    common = ["--metadata-store", url, "--broker-url", pulsar_broker.service_url, "--config", str(cfg)]
    for topic, ids in OWN.items():
        r = run_cli(*common, "enqueue", "--from-file", str(_requests(tmp_path / f"{ids[0]}.jsonl", topic, ids)))
        assert r.returncode == 0, r.stderr
    client = pulsar.Client(pulsar_broker.service_url)  # the forger may produce to acme's topic, no more
    try:
        client.create_producer("persistent://acme/orders/__ledger_deletion").send(
            json.dumps({"topicName": GLOBEX, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER",
                        "ledgerId": FORGED, "reason": "trim", "markedAt": 1}).encode())
    finally:
        client.close()
    acme_port = free_port()
    acme = _daemon(common, "--namespace", "acme/orders", port=acme_port)
    globex = _daemon(common, "--tenant", "globex")
    try:
        wait_until(lambda: _present(url, [*OWN[ACME], *OWN[GLOBEX]]) == [], 90, "both tenants' deletions")
        wait_until(lambda: len(_dlq(pulsar_broker.service_url, "acme/orders")) == 1, 60, "the forged request parked")
        listed = json.loads(run_cli(*common, "--json", "dlq", "list", "--namespace", "acme/orders").stdout)
        assert [(e["request"]["ledgerId"], e["reason"]) for e in listed] == [(FORGED, "cross-namespace")]
        assert json.loads(run_cli(*common, "--json", "dlq", "list", "--namespace", "globex/events").stdout) == []
        api = f"http://127.0.0.1:{acme_port}/admin/v2/ledger-deletion/dlq?namespace=acme/orders"
        with urllib.request.urlopen(api, timeout=10) as r:
            assert [e["request"]["ledgerId"] for e in json.loads(r.read())] == [FORGED]
        # acme's daemon acts for acme through its admin API too (an admin delete for another
        # tenant's namespace must be refused, never answered 200 "deleted")
        delete = urllib.request.Request(
            f"http://127.0.0.1:{acme_port}/admin/v2/ledger-deletion/delete", method="POST",
            headers={"Content-Type": "application/json"},
            data=json.dumps({"topicName": GLOBEX, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER",
                             "ledgerId": FORGED}).encode())
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(delete, timeout=30)
        assert refused.value.code == 403 and json.loads(refused.value.read())["outcome"] == "out_of_scope"
    finally:
        outs = {}
        for name, proc in (("acme", acme), ("globex", globex)):
            proc.send_signal(signal.SIGTERM)
            outs[name] = proc.communicate(timeout=60)[1]
            print(f"--- {name} daemon's log (last lines)\n" + "\n".join(outs[name].splitlines()[-15:]))
    assert _deleted_by(outs["acme"]) == set(OWN[ACME])
    assert _deleted_by(outs["globex"]) == set(OWN[GLOBEX])
    assert _present(url, [FORGED]) == [FORGED], "a cross-namespace request deletes nothing"
    [parked] = _dlq(pulsar_broker.service_url, "acme/orders")
    assert parked.properties()["reason"] == "cross-namespace"
    assert _dlq(pulsar_broker.service_url, "globex/events") == []


def test_switching_to_namespace_scope_with_requests_in_flight_loses_none(cluster, tmp_path: Path) -> None:  # noqa: ANN001
    url, cfg = cluster
    cluster_cfg = tmp_path / "cluster-scope.toml"
    cluster_cfg.write_text(cfg.read_text().replace('ledgerDeletionTopicScope = "namespace"\n', ""))
    data_dir = str(tmp_path / "data")  # the embedded broker: it keeps the cluster topic's partition count
    before = ["--metadata-store", url, "--data-dir", data_dir, "--config", str(cluster_cfg)]
    r = run_cli(*before, "enqueue", "--from-file", str(_requests(tmp_path / "a.jsonl", ACME, OWN[ACME])))
    assert r.returncode == 0, r.stderr  # in flight on the cluster-wide topic when the scope switches
    after = ["--metadata-store", url, "--data-dir", data_dir, "--config", str(cfg)]
    r = run_cli(*after, "enqueue", "--from-file", str(_requests(tmp_path / "g.jsonl", GLOBEX, OWN[GLOBEX])))
    assert r.returncode == 0, r.stderr  # sent after the switch: to globex's own topic
    daemon = _daemon(after)  # unrestricted: serves every namespace and drains the cluster-wide topics
    try:
        wait_until(lambda: _present(url, [*OWN[ACME], *OWN[GLOBEX]]) == [], 90, "every request, old and new")
    finally:
        daemon.send_signal(signal.SIGTERM)
        err = daemon.communicate(timeout=60)[1]
    assert _deleted_by(err) == {*OWN[ACME], *OWN[GLOBEX]}


def test_run_refuses_a_bad_scope_in_one_line(tmp_path: Path) -> None:
    common = ["--data-dir", str(tmp_path / "data"), "--admin-address", f"127.0.0.1:{free_port()}"]
    run_cli("run", *common, "--tenant", "acme", "--namespace", "acme/orders").assert_one_line_error(2, "not both")
    run_cli("run", *common, "--namespace", "acme/orders").assert_one_line_error(2, "ledgerDeletionTopicScope")
    run_cli("run", *common, "--namespace", "acme/..").assert_one_line_error(2, "TENANT/NAMESPACE")
