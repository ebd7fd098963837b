"""The leak watcher's role, built from the daemon's service: its stores, storage checks and producer.

Off (None) when ``ledgerDeletionLeakWatcherEnabled`` is false, and on a daemon restricted to a
tenant or a namespace: watching reads every tenant's metadata, which a tenant's own daemon must
not act on (the cluster's daemon watches for everyone, each leak's request goes to its own
namespace's topic under namespace scope).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from deletion_service.leak_watcher.role import ROLE_PATH, WatcherRole, replica_name
from deletion_service.leak_watcher.storage import still_stored
from deletion_service.protocol.request import PendingDeleteLedgerInfo
from deletion_service.service import LedgerDeletionService

_log = logging.getLogger("deletion_service.daemon")


def watcher_role(service: LedgerDeletionService) -> WatcherRole | None:
    cfg = service.config
    if not cfg.ledger_deletion_leak_watcher_enabled or service.restricted_to is not None:
        return None
    root = cfg.bookkeeper_ledgers_root_path

    def send(requests: Sequence[PendingDeleteLedgerInfo]) -> list[PendingDeleteLedgerInfo]:
        answers = service.send_pending_deletes(requests)
        unsent = [r for r, answer in zip(requests, answers, strict=True) if not isinstance(answer, str)]
        if unsent:
            _log.warning("leak watcher: the broker took %d of %d requests; the rest go again next pass",
                         len(requests) - len(unsent), len(requests))
        return unsent

    return WatcherRole(service.store, service.store.leadership(ROLE_PATH, replica_name()),
                       still_stored(service.bk_store, root, service.gatherer.layout, service.offload), send,
                       service.metrics.leak_watcher, cfg.ledger_deletion_leak_watcher_settle_seconds)
