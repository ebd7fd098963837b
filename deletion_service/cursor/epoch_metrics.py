"""Prometheus metrics of the cursor epoch (PIP-269 "Metrics") and of the ack-state budget.

``pulsar_cursor_epoch_increase_count`` is a Counter, so prometheus-client
exports it as ``pulsar_cursor_epoch_increase_count_total``;
``pulsar_cursor_epoch_increase_task_state`` is 1 while a change runs — stuck at
1 means consumption is stuck.  Labels
``[cluster, namespace, topic, subscription]``.  The registry is a parameter so
tests use their own and the daemon exposes :data:`REGISTRY`.

``pulsar_cursor_metadata_size_in_memory_bytes`` (per cursor) is what the
cursor's whole state took at its last persist, and
``pulsar_cursor_metadata_max_persist_bytes`` the budget in force then, so the
proposal's alert is ``size > on() group_left max_persist``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge

LABELS = ("cluster", "namespace", "topic", "subscription")

#: The registry the daemon serves on ``/metrics`` for the cursor core.
REGISTRY = CollectorRegistry()

_families: dict[tuple[str, int], tuple[CollectorRegistry, tuple]] = {}
_lock = threading.Lock()


def _once_per_registry(kind: str, registry: CollectorRegistry, build: Callable[[], tuple]) -> tuple:
    """Build a metric family set once per registry (prometheus-client refuses duplicates in one)."""
    with _lock:
        found = _families.get((kind, id(registry)))
        if found is None or found[0] is not registry:  # an id may be reused by a later registry
            found = (registry, build())
            _families[(kind, id(registry))] = found
        return found[1]


def _metrics_for(registry: CollectorRegistry) -> tuple[Counter, Gauge]:
    return _once_per_registry("epoch", registry, lambda: (
        Counter("pulsar_cursor_epoch_increase_count",
                "Occasional read position changes of the cursor (epoch increases)", LABELS, registry=registry),
        Gauge("pulsar_cursor_epoch_increase_task_state",
              "1 while a cursor epoch increase task runs, else 0", LABELS, registry=registry)))


def _size_metrics_for(registry: CollectorRegistry) -> tuple[Gauge, Gauge]:
    return _once_per_registry("size", registry, lambda: (
        Gauge("pulsar_cursor_metadata_size_in_memory_bytes",
              "Bytes the cursor's whole metadata (ack state included) took at its last persist",
              LABELS, registry=registry),
        Gauge("pulsar_cursor_metadata_max_persist_bytes",
              "The persist budget: managedLedgerMaxAckStateInBytesToPersist, capped by the "
              "metadata store's request limit", registry=registry)))


@dataclass
class CursorLabels:
    """The cursor one observer reports for, as the metrics' labels."""

    cluster: str
    namespace: str
    topic: str
    subscription: str
    registry: CollectorRegistry = REGISTRY

    @property
    def labels(self) -> tuple[str, str, str, str]:
        return self.cluster, self.namespace, self.topic, self.subscription


@dataclass
class EpochMetrics(CursorLabels):
    """An :class:`~.epoch.EpochObserver` that records one cursor's epoch changes."""

    def __post_init__(self) -> None:
        counter, gauge = _metrics_for(self.registry)
        self._count = counter.labels(*self.labels)
        self._state = gauge.labels(*self.labels)
        self._state.set(0)

    def on_start(self) -> None:
        self._state.set(1)

    def on_end(self, increased: bool) -> None:
        if increased:
            self._count.inc()
        self._state.set(0)


@dataclass
class AckStateMetrics(CursorLabels):
    """Told after each persist: the cursor's full metadata size and the budget it was held to."""

    def __post_init__(self) -> None:
        size, self._budget = _size_metrics_for(self.registry)
        self._size = size.labels(*self.labels)

    def on_persist(self, full_size: int, budget: int) -> None:
        self._size.set(full_size)
        self._budget.set(budget)
