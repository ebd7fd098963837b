"""Is a departed copy still in storage?  The watcher's one question before it requests a leak.

A BookKeeper ledger is there while its metadata node is (BookKeeper deletes the node when it deletes
the ledger); an offloaded part is there while any of its objects is.  A copy that cannot be checked
(the store or the offloader refuses, the driver is not allowed) counts as stored: the request then
goes to the delete phase, which checks it again and settles it either way, where a wrong "gone"
here would leave a leak unrequested.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from deletion_service.protocol.request import LedgerType, PendingDeleteLedgerInfo
from metastore.formats import LedgerLayout, ledger_path, managed_ledger_name
from metastore.interface import MetadataStore, MetadataStoreError
from offloaders.interface import OffloadError, OffloadTarget
from offloaders.registry import OffloaderSettings, offloader_for

_log = logging.getLogger(__name__)


def still_stored(bk_store: MetadataStore, ledgers_root: str, layout: LedgerLayout | str | Callable[[], LedgerLayout],
                 offload: OffloaderSettings) -> Callable[[PendingDeleteLedgerInfo], bool]:
    """``layout``: BookKeeper's ledger layout, or how to read it when first needed."""
    def check(request: PendingDeleteLedgerInfo) -> bool:
        if request.ledger_type == LedgerType.LEDGER:
            try:
                path = ledger_path(ledgers_root, request.ledger_id, layout() if callable(layout) else layout)
                return bk_store.get(path) is not None
            except MetadataStoreError as e:
                _log.warning("leak watcher: cannot tell whether ledger %d is stored (%s): requesting it",
                             request.ledger_id, e)
                return True
        assert request.offload_context is not None
        try:
            target = OffloadTarget.from_offload_context(  # located as the delete phase locates it
                request.ledger_id, request.offload_context.model_dump(by_alias=True),
                managed_ledger_name(request.topic_name))
            offloader = offloader_for(target.driver_name, offload)
            return any(offloader.exists(target, name) for name in offloader.object_names(target))
        except (OffloadError, ValueError) as e:
            _log.warning("leak watcher: cannot tell whether %s is stored (%s): requesting it", request.describe(), e)
            return True

    return check
