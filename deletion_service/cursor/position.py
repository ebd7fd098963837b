"""Positions: the ``(ledger_id, entry_id)`` pair the whole cursor core orders by.

We reuse :class:`metastore.formats.Position` (a ``NamedTuple``) rather than wrap
it: the cursor node, the managed-ledger node and the cursor core then share one
type, so a position read from ZooKeeper compares and hashes exactly like one
computed here, with no conversions at the boundaries.
"""

from __future__ import annotations

import re

from metastore.formats import Position

__all__ = ["Position", "parse_position", "predecessor", "successor"]

_SYNTAX = re.compile(r"\s*(-?\d+)\s*:\s*(-?\d+)\s*")


def parse_position(text: str) -> Position:
    """Parse ``LEDGER:ENTRY`` (the CLI's syntax); ``ValueError`` naming the expected form."""
    match = _SYNTAX.fullmatch(text)
    if match is None:
        raise ValueError(f"invalid position {text!r}: expected LEDGER:ENTRY, e.g. 1234:0")
    ledger_id, entry_id = int(match.group(1)), int(match.group(2))
    if ledger_id < 0 or entry_id < 0:
        raise ValueError(f"invalid position {text!r}: ledger and entry ids must be >= 0")
    return Position(ledger_id, entry_id)


def predecessor(position: Position) -> Position:
    """The mark-delete position that acknowledges everything strictly before ``position``.

    Pulsar's ``getPreviousPosition`` returns ``(L, E-1)`` for ``E > 0`` and, for
    ``E == 0``, the last entry of the previous non-empty ledger or ``(L, -1)``.
    ``(L, -1)`` acknowledges exactly the same entries as "last entry of the
    previous ledger", needs no ledger list, and is what Pulsar itself writes when
    there is no previous ledger, so we always use ``(L, E-1)``.
    """
    return Position(position.ledger_id, position.entry_id - 1)


def successor(position: Position) -> Position:
    """The next entry id in the same ledger (a log normalises it across ledgers)."""
    return Position(position.ledger_id, position.entry_id + 1)
