"""Namespace scope: which namespaces the daemon serves, looked up at start and again now and then.

A namespace created while the daemon runs gets its requests read within
``ledgerDeletionNamespaceRefreshSeconds``.  The look runs on the delete-phase
thread between two batches, so subscribing never races a batch.  A failed look
(the store or broker down) is logged and tried again at the next interval:
the namespaces already served stay served.  Cluster scope has nothing to look up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from deletion_service.service import LedgerDeletionService

_log = logging.getLogger("deletion_service.daemon")  # the daemon's pieces log under one name


class NamespaceDiscovery:
    """Finds the namespaces to serve (``namespaces``: None in cluster scope) and subscribes to new ones."""

    def __init__(self, service: LedgerDeletionService, namespaces: Callable[[], list[str]] | None,
                 clock: Callable[[], float]) -> None:
        self._service, self.namespaces, self._clock = service, namespaces, clock
        self._last_look = clock()

    def first(self) -> list[str] | None:
        """The namespaces to serve from the start (None: cluster scope)."""
        return self.namespaces() if self.namespaces is not None else None

    @staticmethod
    def say_served(served: list[str] | None) -> None:
        """Once the worker serves them: which namespaces (nothing to say in cluster scope)."""
        if served is None:
            return
        _log.info("namespace scope: serving %d namespace(s)%s", len(served),
                  f": {', '.join(served[:10])}{' …' if len(served) > 10 else ''}" if served else "")

    def look_again_if_due(self) -> None:
        """Subscribe to namespaces created since the last look, every ``ledgerDeletionNamespaceRefreshSeconds``."""
        every = self._service.config.ledger_deletion_namespace_refresh_seconds
        if self.namespaces is None or self._clock() - self._last_look < every:
            return
        self._last_look = self._clock()
        try:
            new = self._service.serve_namespaces(self.namespaces())
        except Exception as e:  # noqa: BLE001 - the store or broker is down: the next look tries again
            _log.warning("looking for new namespaces failed (%s); trying again in %d s", e, every)
            return
        if new:
            _log.info("now serving %d more namespace(s): %s", len(new), ", ".join(new))
