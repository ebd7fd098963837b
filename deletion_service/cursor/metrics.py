"""Prometheus metrics of the cursor epoch (PIP-269 "Metrics") and of the ack-state budget.

``pulsar_cursor_epoch_increase_count`` is a Counter, so prometheus-client
exports it as ``pulsar_cursor_epoch_increase_count_total``;
``pulsar_cursor_epoch_increase_task_state`` is 1 while a change runs — stuck at
1 means consumption is stuck (the seed's alert).  Labels
``[cluster, namespace, topic, subscription]``.  The registry is a parameter so
tests use their own and the daemon exposes :data:`REGISTRY`.

``pulsar_cursor_metadata_size_in_memory_bytes`` (per cursor) is what the
cursor's whole state took at its last persist, and
``pulsar_cursor_metadata_max_persist_bytes`` the budget in force then, so the
seed's alert is ``size > on() group_left max_persist``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge

LABELS = ("cluster", "namespace", "topic", "subscription")

#: The registry the daemon serves on ``/metrics`` for the cursor core.
REGISTRY = CollectorRegistry()

_families: dict[int, tuple[CollectorRegistry, Counter, Gauge]] = {}
_size_families: dict[int, tuple[CollectorRegistry, Gauge, Gauge]] = {}
_lock = threading.Lock()


def _metrics_for(registry: CollectorRegistry) -> tuple[Counter, Gauge]:
    """One metric family per registry (prometheus-client refuses duplicates in a registry)."""
    with _lock:
        found = _families.get(id(registry))
        if found is None or found[0] is not registry:
            counter = Counter("pulsar_cursor_epoch_increase_count",
                              "Occasional read position changes of the cursor (epoch increases)",
                              LABELS, registry=registry)
            gauge = Gauge("pulsar_cursor_epoch_increase_task_state",
                          "1 while a cursor epoch increase task runs, else 0", LABELS, registry=registry)
            found = (registry, counter, gauge)
            _families[id(registry)] = found
        return found[1], found[2]


@dataclass
class EpochMetrics:
    """An :class:`~.epoch.EpochObserver` that records one cursor's epoch changes."""

    cluster: str
    namespace: str
    topic: str
    subscription: str
    registry: CollectorRegistry = REGISTRY

    def __post_init__(self) -> None:
        counter, gauge = _metrics_for(self.registry)
        labels = (self.cluster, self.namespace, self.topic, self.subscription)
        self._count = counter.labels(*labels)
        self._state = gauge.labels(*labels)
        self._state.set(0)

    def on_start(self) -> None:
        self._state.set(1)

    def on_end(self, increased: bool) -> None:
        if increased:
            self._count.inc()
        self._state.set(0)


def _size_metrics_for(registry: CollectorRegistry) -> tuple[Gauge, Gauge]:
    with _lock:
        found = _size_families.get(id(registry))
        if found is None or found[0] is not registry:
            size = Gauge("pulsar_cursor_metadata_size_in_memory_bytes",
                         "Bytes the cursor's whole metadata (ack state included) took at its last persist",
                         LABELS, registry=registry)
            budget = Gauge("pulsar_cursor_metadata_max_persist_bytes",
                           "The persist budget: managedLedgerMaxAckStateInBytesToPersist, capped by the "
                           "metadata store's request limit", registry=registry)
            found = (registry, size, budget)
            _size_families[id(registry)] = found
        return found[1], found[2]


@dataclass
class AckStateMetrics:
    """Told after each persist: the cursor's full metadata size and the budget it was held to."""

    cluster: str
    namespace: str
    topic: str
    subscription: str
    registry: CollectorRegistry = REGISTRY

    def __post_init__(self) -> None:
        size, self._budget = _size_metrics_for(self.registry)
        self._size = size.labels(self.cluster, self.namespace, self.topic, self.subscription)

    def on_persist(self, full_size: int, budget: int) -> None:
        self._size.set(full_size)
        self._budget.set(budget)
