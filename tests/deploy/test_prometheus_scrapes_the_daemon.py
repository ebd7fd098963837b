"""End to end: a real Prometheus (Debian's) scrapes the running daemon and the DLQ alerts go off.

The daemon runs as operators run it (``ledger-deletion run``, embedded broker), Prometheus
loads ``deploy/prometheus/ledger-deletion-alerts.yml`` unchanged and evaluates it every
second.  Undecodable messages sent to the deletion topic go to the DLQ; the alerts on
the DLQ must then turn active: ``LedgerDeletionDLQGrowing`` fires (it has no ``for``) and
``LedgerDeletionDLQNotEmpty`` goes pending (its ``for`` is 6 hours).  Before that, with
the daemon scraped and nothing dead-lettered, neither may be active. Real requests are
deleted alongside, and every query of the Grafana dashboard then answers from the scrapes.

The orphan scan's counts reach Prometheus through Debian's ``prometheus-pushgateway``
(``scan-orphans --pushgateway``): a push that names missing ledgers fires
``LedgerDeletionMissingLedgers``, one that names none does not.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from deletion_service.config import DeletionConfig
from deletion_service.embedded.broker import EmbeddedBroker, stop_pid
from deletion_service.orphans.push import JOB, push_summary
from deletion_service.orphans.summary import ScanSummary
from deletion_service.protocol.topics import DeletionTopics
from metastore import open_store
from tests.support.cli_runner import run_cli
from tests.support.daemon_process import answers
from tests.support.deletion_world import GARBAGE, send_raw
from tests.support.grafana_dashboard import dashboard_queries
from tests.support.harness import ServerProcess, debian_tool, free_port, wait_until

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "ledger-deletion-alerts.yml"
PROMETHEUS = debian_tool("prometheus")
PUSHGATEWAY = debian_tool("prometheus-pushgateway")
pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="prometheus missing: scripts/test.sh installs Debian's")

TOPIC = "persistent://t/ns/e2e"
LEDGERS = range(1, 4)  # deleted for real, so the latency histogram has observations


class PrometheusServer(ServerProcess):
    """Debian's ``prometheus`` on loopback, scraping and evaluating every second, data in its dir."""

    def __init__(self, workdir: Path, targets: dict[str, str]) -> None:
        super().__init__("prometheus", workdir)
        self.targets = targets  # job name -> host:port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> PrometheusServer:
        self.port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            # honor_labels: a Pushgateway's samples keep the job they were pushed under
            "scrape_configs": [{"job_name": job, "honor_labels": True, "static_configs": [{"targets": [target]}]}
                               for job, target in self.targets.items()],
        }
        (self.workdir / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        self._spawn([PROMETHEUS, "--config.file=prometheus.yml", f"--storage.tsdb.path={self.workdir / 'data'}",
                     f"--web.listen-address=127.0.0.1:{self.port}"])  # type: ignore[list-item]
        wait_until(lambda: self._get("/-/ready") is not None, 30, "prometheus", self.proc, self.log_path)
        return self

    def _get(self, path: str) -> bytes | None:
        try:
            with urllib.request.urlopen(self.url + path, timeout=2) as r:
                return r.read()
        except OSError:
            return None

    def api(self, path: str) -> list:
        body = self._get("/api/v1/" + path)
        return [] if body is None else json.loads(body)["data"]

    def alert_states(self) -> dict[str, str]:
        return {a["labels"]["alertname"]: a["state"] for a in self.api("alerts")["alerts"]}

    def value(self, query: str) -> float | None:
        result = self.api("query?query=" + urllib.parse.quote(query))["result"]
        return float(result[0]["value"][1]) if result else None


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """``ledger-deletion run`` in embedded mode: (admin host:port, the broker's service URL)."""
    data_dir, admin = tmp_path / "data", f"127.0.0.1:{free_port()}"
    data_dir.mkdir()
    with open_store(f"sqlite:///{data_dir / 'metadata.db'}") as store:
        writer = ClusterWriter(store)
        writer.ensure_layout()
        for lid in LEDGERS:
            writer.bk_ledger(lid, pulsar_custom_metadata(TOPIC))
    log = open(tmp_path / "daemon.log", "wb")  # noqa: SIM115 - the child's for its lifetime
    proc = subprocess.Popen([sys.executable, "-m", "deletion_service.cli.main", "run", "--data-dir", str(data_dir),
                             "--admin-address", admin], stdout=log, stderr=subprocess.STDOUT)
    log.close()
    try:
        wait_until(lambda: answers(f"http://{admin}/healthz"), 60, "the daemon's admin API", proc=proc,
                   log_path=tmp_path / "daemon.log")
        info = EmbeddedBroker(data_dir).read_info()
        assert info is not None
        yield admin, info.serviceUrl
    finally:
        proc.terminate()
        proc.wait(30)
        info = EmbeddedBroker(data_dir).read_info()  # the daemon stops its broker; make sure
        if info is not None and EmbeddedBroker(data_dir).is_ours_and_alive(info):
            stop_pid(info.pid)


def test_dlq_alerts_go_off_once_messages_reach_the_dlq(daemon: tuple[str, str], tmp_path: Path) -> None:
    admin, service_url = daemon
    prom = PrometheusServer(tmp_path / "prometheus", {"ledger-deletion": admin}).start()
    try:
        # Scraped and evaluated, nothing dead-lettered: no DLQ alert (the rule's series is there, at 0).
        wait_until(lambda: prom.value('pulsar_ledger_deletion_acked_total{outcome="dlq"}') == 0, 30,
                   "a scrape of the daemon", interval=0.5)
        seen = datetime.now(UTC)
        wait_until(lambda: _evaluated_since(prom, "LedgerDeletionDLQGrowing", seen), 10, "a rule evaluation",
                   interval=0.5)
        assert prom.value('up{job="ledger-deletion"}') == 1
        assert not {"LedgerDeletionDLQGrowing", "LedgerDeletionDLQNotEmpty"} & set(prom.alert_states())

        send_raw(service_url, DeletionTopics.from_config(DeletionConfig()).partition_topics[0], GARBAGE)

        requests = tmp_path / "requests.jsonl"
        requests.write_text("".join(json.dumps({"topicName": TOPIC, "ledgerComponent": "MANAGED_LEDGER",
                                                "ledgerType": "LEDGER", "ledgerId": lid, "reason": "trim"}) + "\n"
                                    for lid in LEDGERS))
        r = run_cli("enqueue", "--from-file", str(requests), "--data-dir", str(tmp_path / "data"))
        assert r.returncode == 0, r.stderr

        wait_until(lambda: prom.alert_states().get("LedgerDeletionDLQGrowing") == "firing", 30,
                   "LedgerDeletionDLQGrowing firing", interval=0.5)
        assert prom.value('pulsar_ledger_deletion_acked_total{outcome="dlq"}') == len(GARBAGE)
        # dlq_size is the DLQ subscription's backlog: the daemon refreshes it every 10 s from the
        # broker's own metrics, which the embedded broker refreshes about as often.
        wait_until(lambda: prom.alert_states().get("LedgerDeletionDLQNotEmpty") == "pending", 60,
                   "LedgerDeletionDLQNotEmpty pending", interval=0.5)
        assert prom.value("pulsar_ledger_deletion_dlq_size") == len(GARBAGE)

        # The dashboard's queries, as Grafana sends them, answer from what was scraped.
        wait_until(lambda: prom.value('pulsar_ledger_deletion_deleted_total{type="LEDGER"}') == len(LEDGERS), 30,
                   "the deletions scraped", interval=0.5)
        for title, queries in dashboard_queries().items():
            for query in queries:
                if JOB in query:
                    continue  # the scan's panel reads the Pushgateway, not scraped here (the test below)
                assert prom.api("query?query=" + urllib.parse.quote(query))["result"], (title, query)
        p99 = prom.value(dashboard_queries()["p99 send to delete"][0])
        assert p99 is not None and 0 < p99 <= 60, p99
    finally:
        prom.stop()


def _summary(missing: int) -> ScanSummary:
    return ScanSummary(orphan_ledgers=5, orphan_offloaded_objects=1, missing_ledgers=missing, orphan_ledger_bytes=10,
                       orphan_object_bytes=20, scanned_ledgers=100, references=90, scanned_objects=4, min_age_s=86400,
                       scanned_at_ms=1_700_000_000_000)


@pytest.mark.skipif(PUSHGATEWAY is None, reason="prometheus-pushgateway missing: scripts/test.sh installs Debian's")
def test_a_scan_that_finds_missing_ledgers_fires_through_the_pushgateway(tmp_path: Path) -> None:
    gateway = ServerProcess("pushgateway", tmp_path / "pushgateway", port=free_port())
    gateway._spawn([PUSHGATEWAY, f"--web.listen-address=127.0.0.1:{gateway.port}",  # type: ignore[list-item]  # noqa: SLF001
                    f"--persistence.file={tmp_path / 'pushgateway.data'}"])  # not Debian's shared default file
    url = f"http://127.0.0.1:{gateway.port}"
    prom = None
    try:
        wait_until(lambda: answers(url + "/-/ready"), 30, "pushgateway", gateway.proc, gateway.log_path)
        push_summary(url, _summary(missing=0))
        prom = PrometheusServer(tmp_path / "prometheus", {"pushgateway": f"127.0.0.1:{gateway.port}"}).start()
        query = f'pulsar_ledger_deletion_scan_orphan_ledgers{{job="{JOB}"}}'
        wait_until(lambda: prom.value(query) == 5, 30, "the scan's counts scraped", interval=0.5)
        seen = datetime.now(UTC)
        wait_until(lambda: _evaluated_since(prom, "LedgerDeletionMissingLedgers", seen), 10, "a rule evaluation",
                   interval=0.5)
        assert "LedgerDeletionMissingLedgers" not in prom.alert_states()

        push_summary(url, _summary(missing=2))  # the next scan's push replaces the last
        wait_until(lambda: prom.alert_states().get("LedgerDeletionMissingLedgers") == "firing", 30,
                   "LedgerDeletionMissingLedgers firing", interval=0.5)
    finally:
        if prom is not None:
            prom.stop()
        gateway.stop()



def _evaluated_since(prom: PrometheusServer, alert: str, since: datetime) -> bool:
    """The alerting rule ``alert`` was evaluated after ``since`` (its lastEvaluation, in ns precision)."""
    rule = next(r for r in prom.api("rules")["groups"][0]["rules"] if r["name"] == alert)
    at = re.sub(r"(\.\d{6})\d*", r"\1", rule["lastEvaluation"]).replace("Z", "+00:00")
    return datetime.fromisoformat(at) > since
