"""Single reads that several threads ask for at once, sent to ZooKeeper together as one multi-read.

Why: kazoo costs about half a millisecond of client CPU per request.  A caller that asks about
many nodes one ``get`` at a time from several threads (the leak watcher asks BookKeeper's
metadata whether each departed ledger is still stored: a thousand a second on a busy cluster)
would spend half a core on requests; grouped, one request and one reply carry them all.

How: a thread that asks while no read is in flight reads alone (a lone caller's ``get`` is the
single read it always was).  Threads that ask while one is in flight wait; when it ends, its
reader hands the waiting group to the first of them, which reads for the whole group in one
``get_many`` and hands the next group on in turn: each reader reads once, for its own group.  A
group whose read fails is read again node by node, so each caller gets exactly what its own
``get`` would have given: its node, None, or its own error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from metastore.interface import MetadataStoreError, Node


class _Ask:
    __slots__ = ("done", "error", "node", "path", "served")

    def __init__(self, path: str) -> None:
        self.path = path
        self.done = threading.Event()  # set when served, or when handed the waiting group to read
        self.served = False
        self.node: Node | None = None
        self.error: Exception | None = None

    def outcome(self) -> Node | None:
        if self.error is not None:
            raise self.error
        return self.node


class GroupedReads:
    """``get`` for many threads: ``single(path)`` reads one node, ``many(paths)`` several at once
    (both raise as the store's reads do)."""

    def __init__(self, single: Callable[[str], Node | None],
                 many: Callable[[list[str]], dict[str, Node | None]]) -> None:
        self._single, self._many = single, many
        self._lock = threading.Lock()
        self._waiting: list[_Ask] = []
        self._reading = False

    def get(self, path: str) -> Node | None:
        ask = _Ask(path)
        with self._lock:
            if self._reading:
                self._waiting.append(ask)
                group = None
            else:
                self._reading = True
                group = [ask]
        while group is None:
            ask.done.wait()
            if ask.served:
                return ask.outcome()
            ask.done.clear()  # handed the group this thread waits in: it reads for all of it
            with self._lock:
                group, self._waiting = self._waiting, []
        try:
            self._read(group)
        finally:
            for unserved in (a for a in group if not a.served):  # only if the read itself was interrupted
                unserved.error, unserved.served = MetadataStoreError("a grouped read was interrupted"), True
                unserved.done.set()
            with self._lock:
                if self._waiting:
                    self._waiting[0].done.set()
                else:
                    self._reading = False
        return ask.outcome()

    def _read(self, group: list[_Ask]) -> None:
        """Serve every ask of ``group``; never raises (each ask keeps its own error)."""
        nodes: dict[str, Node | None] | None = None
        if len(group) > 1:
            try:
                nodes = self._many(list(dict.fromkeys(ask.path for ask in group)))
            except Exception:  # noqa: BLE001 - read again node by node: each caller gets its own error
                nodes = None
        for ask in group:
            if nodes is not None:
                ask.node = nodes[ask.path]
            else:
                try:
                    ask.node = self._single(ask.path)
                except Exception as e:  # noqa: BLE001 - handed to the caller that asked, raised there
                    ask.error = e
            ask.served = True
            ask.done.set()
