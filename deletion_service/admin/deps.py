"""What the admin API needs from the daemon, gathered in one small object.

``create_app`` takes an :class:`AdminDeps` rather than the daemon itself so the
API can be built (for tests, and for ``scripts/gen_openapi.py``) from any set
of parts, and so nothing here reaches into the daemon's internals.
"""

from __future__ import annotations

import socket
import urllib.parse
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry

from deletion_service.broker.interface import BrokerClient
from deletion_service.inflight import BacklogSource
from deletion_service.leak_watcher.role import WatcherStatus
from deletion_service.protocol.topics import DeletionTopics
from deletion_service.service import LedgerDeletionService
from metastore.interface import MetadataStore

#: component name → ``None`` when reachable, else why not (one line, no secrets).
Readiness = Callable[[], dict[str, str | None]]


@dataclass
class AdminDeps:
    service: LedgerDeletionService
    backlog: BacklogSource
    broker: BrokerClient
    topics: DeletionTopics
    readiness: Readiness
    token: str | None = None
    registries: Sequence[CollectorRegistry] = field(default_factory=list)
    #: Pulsar's ``clusterName``: the ``cluster`` label of every exported sample
    cluster: str = "standalone"
    #: how long a DLQ listing waits for one more message before it decides the queue is drained
    dlq_wait_s: float = 1.0
    #: ``/healthz``: None while the daemon can work, else why not (its embedded broker is gone for good)
    liveness: Callable[[], str | None] = lambda: None
    #: ``/status``'s leak watcher: who watches and how far behind (None: off on this daemon)
    leak_watcher: Callable[[], WatcherStatus | None] = lambda: None

    @classmethod
    def unwired(cls) -> AdminDeps:
        """Placeholders, for rendering the OpenAPI document (no request may reach it)."""
        return cls(None, None, None, DeletionTopics("persistent://pulsar/system/__ledger_deletion", 1),  # type: ignore[arg-type]
                   lambda: {})

    @classmethod
    def for_service(cls, service: LedgerDeletionService, backlog: BacklogSource, token: str | None,
                    extra_registries: Sequence[CollectorRegistry] = (), probe_timeout_s: float = 3.0) -> AdminDeps:
        """The usual wiring: everything from the service, readiness probing its stores and broker."""
        stores = {"metadataStore": service.store}
        if service.bk_store is not service.store:
            stores["bookkeeperMetadataStore"] = service.bk_store
        probe = DependencyProbe(stores, service.broker, probe_timeout_s,
                                extra={"dispositions": lambda: _dispositions_flowing(service),
                                       "consuming": lambda: _dependencies_up(service)})
        return cls(service, backlog, service.broker, service.topics, probe, token,
                   [service.metrics.registry, *extra_registries], cluster=service.config.cluster_name)


class DependencyProbe:
    """``/readyz``: is each metadata store and the broker reachable, within a deadline?

    Probes run concurrently on a small pool and are bounded by ``timeout_s``:
    a readiness check that hangs as long as the thing it checks is useless to
    a kubelet.  A store is probed with a read of its root; the broker with a
    TCP connection to its service URL (a lookup through the Pulsar client
    would wait out its 15 s operation timeout when the broker is away).
    """

    def __init__(self, stores: dict[str, MetadataStore], broker: BrokerClient, timeout_s: float = 3.0,
                 extra: dict[str, Callable[[], None]] | None = None) -> None:
        self.checks: dict[str, Callable[[], None]] = {name: _store_check(s) for name, s in stores.items()}
        self.checks["broker"] = _broker_check(broker, timeout_s)
        self.checks.update(extra or {})
        self.timeout_s = timeout_s
        self._pool = ThreadPoolExecutor(max_workers=2 * len(self.checks), thread_name_prefix="readyz")

    def __call__(self) -> dict[str, str | None]:
        futures = {name: self._pool.submit(check) for name, check in self.checks.items()}
        out: dict[str, str | None] = {}
        for name, future in futures.items():
            try:
                future.result(timeout=self.timeout_s)
                out[name] = None
            except FutureTimeout:
                out[name] = f"no answer within {self.timeout_s:g}s"
            except Exception as e:  # noqa: BLE001 - any failure means "not ready", reported by type and message
                out[name] = _one_line(e)
        return out


def _dispositions_flowing(service: LedgerDeletionService) -> None:
    """A broker that answers TCP but refuses every publish or ack is not ready either: the
    consumer holds decided messages it cannot hand back (and stops taking new ones)."""
    worker = service.worker
    stuck = worker.stuck() if worker is not None else None
    if stuck is not None:
        raise RuntimeError(stuck)


def _dependencies_up(service: LedgerDeletionService) -> None:
    """While a breaker is open the worker consumes nothing: not ready, whatever the probes say now."""
    down = service.worker.dependencies_down() if service.worker is not None else None
    if down is None and service.audit is not None:
        down = service.audit.refusing  # the trail's last append failed: nothing is deleted until one succeeds
    if down is not None:
        raise RuntimeError(down)


def _store_check(store: MetadataStore) -> Callable[[], None]:
    return lambda: store.get("/") and None


def _broker_check(broker: BrokerClient, timeout_s: float) -> Callable[[], None]:
    url = getattr(broker, "service_url", None)
    if not isinstance(url, str):
        def ask_broker() -> None:
            broker.partitions("persistent://pulsar/system/__readyz")
        return ask_broker
    hosts = _hosts(url)

    def check() -> None:
        errors = []
        for host, port in hosts:
            try:
                socket.create_connection((host, port), timeout=timeout_s).close()
                return
            except OSError as e:
                errors.append(f"{host}:{port}: {e.strerror or e}")
        raise ConnectionError("broker unreachable (" + "; ".join(errors) + ")")

    return check


def _hosts(service_url: str) -> list[tuple[str, int]]:
    """``pulsar://h1:6650,h2:6650`` → [(h1, 6650), (h2, 6650)] (default ports by scheme)."""
    parsed = urllib.parse.urlsplit(service_url)
    default = 6651 if parsed.scheme.endswith("+ssl") else 6650
    return [_host_port(part, default) for part in parsed.netloc.rsplit("@", 1)[-1].split(",")]


def _host_port(part: str, default: int) -> tuple[str, int]:
    if part.startswith("["):  # [::1]:6650
        host, _, rest = part[1:].partition("]")
        port = rest.removeprefix(":")
    elif part.count(":") == 1:
        host, port = part.split(":")
    else:
        host, port = part, ""
    return host, int(port) if port.isdigit() else default


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text[:300]
