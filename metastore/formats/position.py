"""The (ledgerId, entryId) pair every Pulsar metadata format points with."""

from __future__ import annotations

from typing import NamedTuple


class Position(NamedTuple):
    """A position in a managed ledger; a tuple, so ``Position(4, 9) == (4, 9)`` and it sorts."""

    ledger_id: int
    entry_id: int
