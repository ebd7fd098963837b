"""Errors of the cursor core.

Names follow PIP-269's ``CursorModifyingException`` / ``CursorEpochConflictException``
(as ``…Error``, Python's convention).  Persistence errors live here too so the
CLI can turn each into one operator-facing line without importing backends.
"""

from __future__ import annotations


class CursorError(Exception):
    """Base of every cursor-core error."""


class CursorModifyingError(CursorError):
    """A read was attempted while an occasional read position change runs; retry after it ends."""


class CursorEpochConflictError(CursorError):
    """A second occasional read position change was started while one is running."""


class CursorNotFoundError(CursorError):
    """No cursor node at the expected path."""


class CursorLedgerBackedError(CursorError):
    """The cursor's live state is in a BookKeeper cursor ledger we cannot see; refuse to edit it."""


class CursorVersionConflictError(CursorError):
    """A compare-and-set on the cursor node (or a guarded node) lost: somebody wrote it since we read it."""
