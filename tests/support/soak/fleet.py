"""The soak's daemons: today's one, or N replicas on one external pulsar-lite process.

With one daemon (the default) nothing changes: its data dir's embedded broker is the cluster's
broker, started and supervised by the daemon, and ``trim``/``enqueue``/``cursor reset`` find it
there.  Replicas must share one broker (they share the Shared subscription), and the embedded mode
is one daemon per data dir with its own broker: so with ``replicas > 1`` the soak starts one bare
pulsar-lite process itself (as an operator runs a broker), every command is given ``--broker-url``,
and each replica has its own data dir (its lock, its audit trail) and admin port.  Nobody
supervises that broker but the soak: when a fault kills it, the soak restarts it on the same
ports, as Kubernetes would restart a broker pod.

The judge's third invariant lives here too: across every data dir's audit trail, no request is
named ``deleted`` twice (:func:`deleted_twice`).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from deletion_service.broker.interface import BrokerError
from deletion_service.inflight import parse_backlog_metrics
from tests.support.harness import PulsarLiteBroker, free_port, poll
from tests.support.soak.processes import Cli, Daemon, broker_pids

#: The failpoint only the embedded broker's start reaches: replicas run on an external broker.
EMBEDDED_ONLY = frozenset({"broker.starting"})
#: The delete phase's subscription on the request partitions and RETRY (the configured default).
SUBSCRIPTION = "ledger-deletion"
#: A replicated drain ends once the broker's backlog metric has read 0 for this long: two of its
#: ~10 s refreshes, so no reading is one stale from before the last RETRY publish.
DRAIN_QUIET_S = 25.0


@dataclass
class Fleet:
    """``cli`` runs the commands (trim, enqueue, reset); ``daemons`` are the ``run`` processes."""

    cli: Cli
    daemons: list[Daemon]
    broker: PulsarLiteBroker | None = None  # the external broker of a replicated soak

    @classmethod
    def start(cls, root: Path, cli: Cli, replicas: int) -> Fleet:
        if replicas <= 1:
            return cls(cli, [Daemon(cli)])
        broker = PulsarLiteBroker(root / "broker").start()
        cli = replace(cli, broker_url=broker.service_url)
        daemons = [Daemon(replace(cli, data_dir=root / f"data-r{i}"), name=f"replica-{i}") for i in range(replicas)]
        return cls(cli, daemons, broker)

    @property
    def replicated(self) -> bool:
        return self.broker is not None

    def service_url(self) -> str:
        """Where a raw client reaches the broker the daemons consume from."""
        if self.broker is not None:
            return self.broker.service_url
        return json.loads((self.cli.data_dir / "broker" / "broker.json").read_text())["serviceUrl"]

    def data_dirs(self) -> list[Path]:
        return list(dict.fromkeys([self.cli.data_dir, *(d.cli.data_dir for d in self.daemons)]))

    def embedded_broker_pids(self) -> list[int]:
        """Embedded brokers still running in any data dir (none should, once everything stopped)."""
        return [pid for path in self.data_dirs() for pid in broker_pids(path)]

    def drain(self, max_wait_s: int = 300) -> dict:
        """Run until nothing is left; the daemons were stopped (their shutdown timed) just before."""
        return self._drain_replicas(max_wait_s) if self.replicated else self._drain_one(max_wait_s)

    def _drain_one(self, max_wait_s: int) -> dict:
        """``run --exit-when-idle`` in the data dir, until it says its work is done."""
        t0 = time.monotonic()
        code, _ = self.cli.run("run", "--exit-when-idle", "--max-wait", str(max_wait_s), "--admin-address",
                               f"127.0.0.1:{free_port()}", log_name="drain", timeout=max_wait_s + 100)
        return {"exit": code, "seconds": round(time.monotonic() - t0, 1)}

    def _drain_replicas(self, max_wait_s: int) -> dict:
        """Every replica restarted clean, until the broker has said a backlog of 0 on every request
        partition and RETRY for :data:`DRAIN_QUIET_S`; then each is stopped (SIGTERM).

        Not ``--exit-when-idle``: it reads the backlog from the brokers' admin REST on a cluster
        (``--web-service-url``), which pulsar-lite does not serve, so the soak reads the broker's
        ``/metrics`` itself (refreshed every ~10 s: hence a quiet spanning two refreshes)."""
        assert self.broker is not None
        t0 = time.monotonic()
        for daemon in self.daemons:
            daemon.start()
        quiet_since: float | None = None
        seen: list[tuple[float, int]] = []

        def quiet_long_enough() -> bool:  # the backlog read 0 throughout the last DRAIN_QUIET_S
            nonlocal quiet_since
            backlog, now = self._backlog(), time.monotonic()
            if not seen or seen[-1][1] != backlog:
                seen.append((round(now - t0, 1), backlog))
            quiet_since = (quiet_since or now) if backlog == 0 else None
            return quiet_since is not None and now - quiet_since >= DRAIN_QUIET_S

        idle = poll(quiet_long_enough, max_wait_s, interval=1)  # the metrics change every ~10 s at most
        codes = [daemon.stop() for daemon in self.daemons]
        worst = next((c for c in codes if c != 0), 0)
        return {"exit": worst if idle else 124, "seconds": round(time.monotonic() - t0, 1), "exits": codes,
                "backlogAtEnd": seen[-1][1] if seen else -1, "backlogChanges": seen[:12]}

    def _backlog(self) -> int:
        """Unacknowledged requests on the request partitions and RETRY (the DLQ's subscription is
        another), by the broker's metrics; -1 while they cannot be read."""
        assert self.broker is not None
        try:
            return sum(parse_backlog_metrics(self.broker.metrics_text(), SUBSCRIPTION).values())
        except (OSError, BrokerError):
            return -1

    def kill_all(self) -> None:
        for daemon in self.daemons:
            daemon.kill()

    def stop_broker(self) -> None:
        if self.broker is not None:
            self.broker.stop()


def request_key(request: dict) -> tuple:
    """One deletion's identity: the ledger, its type, and which offloaded copy (a LEDGER request and an
    OFFLOAD_LEDGER request for one ledger are two deletions; two identical requests are one)."""
    ctx = request.get("offloadContext") or {}
    return (request.get("topicName"), request.get("ledgerComponent"), request.get("ledgerType"),
            request.get("ledgerId"), ctx.get("uidMsb"), ctx.get("uidLsb"))


def audit_deletions(data_dirs: list[Path]) -> Counter:
    """Request identity → how many ``deleted`` records every data dir's audit trail holds for it."""
    found: Counter = Counter()
    for data_dir in data_dirs:
        for path in sorted((data_dir / "audit").glob("audit-*.jsonl")):
            for line in path.read_text().splitlines():
                try:
                    record = json.loads(line) if line.strip() else None
                except ValueError:  # a line torn by a SIGKILL mid-write names no settled request
                    continue
                if record and record["outcome"] == "deleted" and record["request"] is not None:
                    found[request_key(record["request"])] += 1
    return found


def deleted_twice(data_dirs: list[Path]) -> list[str]:
    """Every request named ``deleted`` more than once across all the audit trails, as text."""
    return [f"deleted {n} times: {key}" for key, n in sorted(audit_deletions(data_dirs).items(), key=str) if n > 1]
