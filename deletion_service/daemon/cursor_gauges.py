"""The cursor-health gauges: every cursor in scope read every ``ledgerDeletionCursorHealthRefreshSeconds``.

Why the daemon does this: the cursor alert (``LedgerDeletionCursorAckStateNearBudget``)
needs a long-running process that sees cursors, and the only other code that does
(``cursor reset``, ``cursor health``) runs in short CLI processes nobody scrapes.
What it reads is what ``cursor health --all`` reads, the same way: the cursor nodes
listed and read in batches (``children_many``/``get_many``, a handful of round
trips whatever the count), read-only, on its own thread (:mod:`.daemon_periodic`)
so a cluster of many cursors never delays a batch.  With N replicas each reads
them all: every 300 s by default; 0 turns it off (the gauges then have no sample
and the cursor alert cannot fire).

A restricted daemon (``run --tenant``/``--namespace``) exports only its own
namespaces' cursors: another tenant's topic names stay out of its ``/metrics``.
A store that cannot be read is logged once; the last reading stays exported (as
the backlog gauges do): a cursor near its budget does not look fine because
ZooKeeper blinked.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from deletion_service.cursor import health
from deletion_service.cursor.ack_budget import PersistBudget
from deletion_service.metrics import CursorHealthGauges, namespace_of
from deletion_service.service import LedgerDeletionService
from metastore import MetadataStore
from metastore.interface import MetadataStoreError

_log = logging.getLogger("deletion_service.daemon")  # the daemon's pieces log under one name


class CursorHealthWatch:
    """One check of every cursor in scope per :meth:`check`, into :class:`~.metrics.CursorHealthGauges`."""

    def __init__(self, store: MetadataStore, budget: PersistBudget, gauges: CursorHealthGauges,
                 in_scope: Callable[[], Callable[[str], bool] | None]) -> None:
        self.store, self.budget, self.gauges = store, budget, gauges
        self._in_scope = in_scope  # asked at each check: the CLI restricts the service after building it
        self._warned = False

    @classmethod
    def for_service(cls, service: LedgerDeletionService) -> CursorHealthWatch:
        return cls(service.store, PersistBudget.from_config(service.config), service.metrics.cursors,
                   lambda: service.restricted_to)

    def check(self) -> None:
        try:
            cursors = health.check(self.store, self.budget)
        except MetadataStoreError as e:
            if not self._warned:
                _log.warning("cannot read the cursors for the cursor-health gauges (the last reading stays): %s", e)
                self._warned = True
            return
        self._warned = False
        allowed = self._in_scope()
        if allowed is not None:
            cursors = [c for c in cursors if allowed(namespace_of(c.topic))]
        self.gauges.set(cursors, health.effective_budget(self.budget, self.store))
