"""The dispatcher's consumers: those connected, and those waiting for a running change to end.

A consumer that connects while a read position change runs joins only when the
change ends, against the new state, so the change is atomic for it too.  When
the last consumer leaves, the next first one reads again from mark-delete + 1
(Pulsar's "dispatcher reset") unless a change moves the cursor first.  This is
the bookkeeping only; when a consumer joins or leaves is :mod:`.membership`'s.
"""

from __future__ import annotations

from .state import Consumer


class ConsumerSet:
    """Connected consumers by name, the ones waiting to join, and whether the next first one rewinds."""

    def __init__(self) -> None:
        self.connected: dict[str, Consumer] = {}
        self._waiting: list[Consumer] = []
        self._rewind_due = False

    def get(self, name: str) -> Consumer | None:
        """The connected consumer called ``name``."""
        return self.connected.get(name)

    def find(self, name: str) -> Consumer | None:
        """The consumer called ``name``, connected or waiting to join."""
        return self.connected.get(name) or next((c for c in self._waiting if c.name == name), None)

    def wait(self, consumer: Consumer) -> None:
        """``consumer`` joins when the running change ends."""
        self._waiting.append(consumer)

    def take_waiting(self) -> list[Consumer]:
        """The consumers waiting to join, in the order they came; none wait afterwards."""
        waiting, self._waiting = self._waiting, []
        return waiting

    @property
    def rewind_due(self) -> bool:
        """No consumer is connected, and the next one to connect reads from mark-delete + 1 again."""
        return not self.connected and self._rewind_due

    def cancel_rewind(self) -> None:
        """A change moved the cursor: that change is the dispatcher reset."""
        self._rewind_due = False

    def connect(self, consumer: Consumer) -> None:
        self._rewind_due = False
        self.connected[consumer.name] = consumer

    def disconnect(self, name: str) -> Consumer | None:
        """Drop ``name`` (waiting or connected); the connected consumer it was, if any."""
        self._waiting = [c for c in self._waiting if c.name != name]
        consumer = self.connected.pop(name, None)
        if consumer is not None and not self.connected:
            self._rewind_due = True
        return consumer

    def epochs(self) -> dict[Consumer, int]:
        """Each connection's consumer epoch now: what a read started now carries to it."""
        return {c: c.epoch.value for c in self.connected.values()}
