"""Which consumer an entry goes to: Key_Shared by key, Shared round-robin, only to one with permits.

Routing alone: whether the entry may go at all (acked, delayed, held for a
recently joined Key_Shared consumer) is the dispatcher's call, made around it.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

from .state import Consumer

Selector = Callable[[str | None, list[str]], str]


def crc_selector(key: str | None, consumers: list[str]) -> str:
    """Key_Shared routing: a stable hash of the key over the sorted consumer names."""
    return consumers[zlib.crc32((key or "").encode()) % len(consumers)]


class Router:
    """Picks the consumer for an entry; remembers where Shared's round-robin stands."""

    def __init__(self, key_shared: bool, selector: Selector = crc_selector) -> None:
        self.key_shared, self.selector = key_shared, selector
        self._round_robin = 0

    def route(self, key: str | None, consumers: dict[str, Consumer]) -> Consumer | None:
        """Key_Shared: the key's consumer, if it has the permits; Shared: the next one that has."""
        names = sorted(consumers)
        if not names:
            return None
        if self.key_shared:
            target = consumers[self.selector(key, names)]
            return target if target.can_take() else None
        for _ in names:
            self._round_robin = (self._round_robin + 1) % len(names)
            target = consumers[names[self._round_robin]]
            if target.can_take():
                return target
        return None
