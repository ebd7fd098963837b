"""The cursor core: positions, ack state, cursor epoch, dispatcher, seek epoch, persistence, budget.

Modules, one concept each (not one Pulsar-sized class):

* :mod:`.position` — ``Position`` and the ``L:E`` syntax;
* :mod:`.acks` — individual and batch-index acks (PIP-54), as per-ledger roaring bitmaps;
* :mod:`.ack_size`, :mod:`.ack_budget` — their exact persisted size, and what of them is
  persisted within ``managedLedgerMaxAckStateInBytesToPersist``;
* :mod:`.epoch` — :class:`ManagedCursor` with the PIP-269 epoch API;
* :mod:`.log`, :mod:`.reads`, :mod:`.state`, :mod:`.routing`, :mod:`.dispatcher`, :mod:`.changes`,
  :mod:`.in_flight`, :mod:`.permits`, :mod:`.consumers`, :mod:`.membership`, :mod:`.generations`
  — an in-memory dispatcher whose state changes atomically with the cursor;
* :mod:`.seek` — the consumer (seek) epoch;
* :mod:`.exceptions` — the cursor core's exceptions;
* :mod:`.persistence`, :mod:`.reset` — the cursor node in the metadata store;
* :mod:`.health` — which cursors' persisted state is near or over the budget;
* :mod:`.epoch_metrics` — Prometheus metrics of epoch increases and of the ack-state size.
"""

from .acks import AckState
from .dispatcher import Dispatcher
from .epoch import EpochObserver, ManagedCursor
from .exceptions import (
    CursorEpochConflictError,
    CursorError,
    CursorLedgerBackedError,
    CursorModifyingError,
    CursorNotFoundError,
    CursorVersionConflictError,
)
from .log import Entry, EntryLog
from .position import Position, parse_position, predecessor, successor
from .reads import Delivery, InFlightRead, ReadKind
from .seek import ClientConsumer, ConsumerEpoch, Message, SeekCommand

__all__ = [
    "AckState", "ClientConsumer", "ConsumerEpoch", "CursorEpochConflictError", "CursorError",
    "CursorLedgerBackedError", "CursorModifyingError", "CursorNotFoundError", "CursorVersionConflictError",
    "Delivery", "Dispatcher", "Entry", "EntryLog", "EpochObserver", "InFlightRead", "ManagedCursor", "Message",
    "Position", "ReadKind", "SeekCommand", "parse_position", "predecessor", "successor",
]
