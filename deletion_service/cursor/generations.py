"""The dispatcher's generations: one per read position change begun, and what was delivered in each.

A generation counts changes *begun*, so a read that completes after a reset
started is attributed to the post-reset stream — exactly where a stale
delivery would hurt.  The record is what the invariant checks judge
(``deletion_service.testing.cursor_invariants``): each generation's start
position and every delivery stamped with its generation.
"""

from __future__ import annotations

from .position import Position
from .reads import Delivery


class Generations:
    """The current generation, where each began, and every delivery made."""

    def __init__(self, read_position: Position) -> None:
        self.current = 0
        self.start: dict[int, Position] = {0: read_position}
        self.deliveries: list[Delivery] = []

    def begin(self, read_position: Position) -> None:
        """A change began: a new generation, reading from ``read_position``."""
        self.current += 1
        self.start[self.current] = read_position
