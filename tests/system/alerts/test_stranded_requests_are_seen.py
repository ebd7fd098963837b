"""Requests a broker handed to a consumer that is gone: seen by the daemon, alerted on, named by ``status``
and ``inflight``, with the remedy.

Real processes: ZooKeeper (a chroot), an external pulsar-lite process of the test's own (the daemons read its
``/metrics`` through ``brokerMetricsUrl``), two ``ledger-deletion run`` replicas, ``promtool`` with the shipped
rules.  One replica freezes (SIGSTOP) while the broker hands it requests, is killed (SIGKILL: its connection
ends with a reset, and pulsar-lite keeps that connection's consumers and what it dispatched to them), and is
started again at once; the other starts beside it.  Nothing else is faked.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.alert_rules import PROMTOOL, promtool_firing
from tests.support.cli_runner import run_cli
from tests.support.harness import PulsarLiteBroker, unread_bytes, wait_until
from tests.support.metrics_scrape import metric, metric_sum, scrape
from tests.support.replicas_world import ReplicaWorld

pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: scripts/test.sh installs Debian's")

STRANDED = 200


@pytest.fixture
def world(tmp_path: Path, zk_url: str, own_pulsar_lite: PulsarLiteBroker) -> Iterator[ReplicaWorld]:
    w = ReplicaWorld(tmp_path, zk_url, own_pulsar_lite.service_url, scope="cluster", partitions=1)
    with w.config.open("a") as f:
        f.write(f'brokerMetricsUrl = "{own_pulsar_lite.metrics_url}"\n')
    yield w
    w.close()


def _undelivered(port: int) -> float | None:
    try:
        return metric(scrape(port), "pulsar_ledger_deletion_undelivered")
    except OSError:
        return None


def _first_ack_counted(broker: PulsarLiteBroker, tag: str) -> bool:
    """Whether the broker has counted an acknowledgement on the request topic's subscription and holds
    nothing handed out there: its figures are refreshed every few seconds, so "0 unacknowledged" alone
    may be a figure from before the first request was even delivered."""
    try:
        text = broker.metrics_text()
    except OSError:
        return False
    labels = {"topic": f"__ld_{tag}", "subscription": "ledger-deletion"}
    return (metric_sum(text, "pulsar_subscription_last_acked_timestamp", **labels) > 0
            and metric_sum(text, "pulsar_subscription_unacked_messages", **labels) == 0)


def _broker_said(broker: PulsarLiteBroker, topic: str) -> str:
    """The broker's own figures of the topics whose name holds ``topic``, for a failure to show."""
    try:
        text = broker.metrics_text()
    except OSError as e:
        return f"(no answer: {e})"
    return "\n".join(line for line in text.splitlines() if topic in line and not line.startswith("#"))[-4000:]


def test_requests_stranded_with_a_killed_replica_are_counted_alerted_and_named_with_the_remedy(
        world: ReplicaWorld, tmp_path: Path, own_pulsar_lite: PulsarLiteBroker) -> None:
    frozen, sibling = world.add_replicas(2)
    frozen.start().wait_ready()
    assert frozen.proc is not None
    # one request deleted first: its consumer has asked the broker for messages before it freezes
    [first] = world.orphans(1)
    world.enqueue([first])
    wait_until(lambda: first not in world.left(), 60, "the first request deleted", interval=0.5)
    # and its acknowledgement at the broker: frozen before it is sent, it would be stranded with the rest
    wait_until(lambda: _first_ack_counted(own_pulsar_lite, world.tag), 60, "the first request's acknowledgement "
               "counted by the broker", interval=0.2)
    pid = frozen.proc.pid
    frozen.proc.send_signal(signal.SIGSTOP)
    unread_before = unread_bytes(pid)
    world.enqueue(world.orphans(STRANDED))  # dispatched to the only consumer: the frozen one
    # Killed the moment they reach it, unread in its socket: the kill resets the connection, and pulsar-lite
    # keeps what it dispatched there.  Killed before they reach it (or after the broker gave up on a client
    # that answers no keep-alive), the connection ends cleanly and the next consumer gets them.
    wait_until(lambda: unread_bytes(pid) - unread_before >= STRANDED * 50, 60, "the requests in the frozen "
               "replica's socket", interval=0.1)
    frozen.stop(signal.SIGKILL)
    frozen.start()
    sibling.start()
    frozen.wait_ready()
    sibling.wait_ready()

    # Both live replicas hold nothing and see the requests handed out and quiet for 30 s on the broker's clock.
    seen: dict[str, float | None] = {}

    def both_count() -> bool:
        seen.update(frozen=_undelivered(frozen.port), sibling=_undelivered(sibling.port))
        return seen["frozen"] == STRANDED and seen["sibling"] == STRANDED

    try:
        wait_until(both_count, 120, f"both replicas counting the {STRANDED} stranded requests as undelivered")
    except RuntimeError as e:
        raise AssertionError(f"{e}: they said {seen}; the broker said:\n"
                             f"{_broker_said(own_pulsar_lite, f'__ld_{world.tag}')}") from e
    assert len(world.left()) == STRANDED  # truly stranded: not one was deleted meanwhile

    # The alert, on what a replica really exports (its scrape held as Prometheus would record it).
    assert "LedgerDeletionRequestsUndelivered" in promtool_firing(scrape(sibling.port), tmp_path)

    status = run_cli("status", "--admin-address", f"127.0.0.1:{sibling.port}", "--wide")
    assert status.returncode == 0, status.stderr
    words = " ".join(status.stdout.split())
    assert f"STRANDED: {STRANDED} request(s)" in words, status.stdout
    assert "restart the broker" in words
    answer = json.loads(run_cli("status", "--admin-address", f"127.0.0.1:{sibling.port}", "--json").stdout)
    assert answer["undelivered"]["count"] == STRANDED

    inflight = run_cli(*world.argv(tmp_path / "cli-data")[3:], "inflight", "--json")
    assert inflight.returncode == 0, inflight.stderr
    reading = json.loads(inflight.stdout)
    assert reading["undelivered"] == STRANDED and reading["estimatedInflight"] == STRANDED, reading
    words = " ".join(run_cli(*world.argv(tmp_path / "cli-data")[3:], "inflight", "--wide").stdout.split())
    assert f"{STRANDED} request(s) were handed to a consumer" in words and "restart the broker" in words
