"""Reading many ZooKeeper nodes at once: multi-reads when the server has them, pipelined single reads if not.

Why: kazoo costs ~250 µs of client CPU per request, so reading a cluster's
ledger znodes one request each is CPU-bound; a multi-read
(:mod:`metastore.zookeeper.multiread`, the wire format) of up to a thousand
nodes pays that once.  A server before 3.6 answers it ``UNIMPLEMENTED``; the
first multi-read finds that out, and every later call on this store reads such
a server the old way, one pipelined ``getData`` per node.  Each call is one
try: retrying is the callers' decision.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any, Final

from kazoo import exceptions as kx

from metastore.interface import MetadataStoreError, MetadataStoreUnavailable, Node
from metastore.zookeeper.connection import ZooKeeperConnection
from metastore.zookeeper.kazoo_errors import KAZOO_ERRORS, map_error
from metastore.zookeeper.multiread import MAX_LIST_OPS, ChunkSizer, MultiListChildren, MultiRead, MultiReadError

#: Multi-reads one ``get_many`` keeps in flight: the server reads one chunk while the
#: client decodes the last, at ``REPLY_BUDGET`` bytes of replies each at most.
MULTI_READ_IN_FLIGHT: Final = 3

_log = logging.getLogger(__name__)


class BatchReads:
    """``get_many`` and ``children_many`` of the ZooKeeper store, over its connection."""

    def __init__(self, connection: ZooKeeperConnection) -> None:
        self._connection = connection
        #: Whether the server answers multi-reads: unknown until the first one is answered.
        self.multi_read: bool | None = None
        self._probing = threading.Lock()
        self._chunks = ChunkSizer()

    def get_many(self, paths: list[str]) -> dict[str, Node | None]:
        """Multi-reads of many nodes per request; pipelined single reads on a server without them.

        The answer is what the single reads give — ``None`` for an absent node — and
        the first node (in the order given) that cannot be read raises as ``get``
        would, so a caller reading node by node after a failed batch sees the same errors.
        """
        if not self._connection.connected:
            raise MetadataStoreUnavailable("ZooKeeper unavailable: not connected")
        if not paths or self.multi_read is False:
            return self.get_pipelined(paths)
        if self.multi_read is None:
            with self._probing:  # one thread finds out; the others then know, connection back
                if self.multi_read is None:
                    return self._probe(paths)
            if self.multi_read is False:
                return self.get_pipelined(paths)
        return self._get_multi_read(paths)

    def _probe(self, paths: list[str]) -> dict[str, Node | None]:
        """The store's first multi-read, which tells whether the server has them.

        On UNIMPLEMENTED, why wait for the connection ZooKeeper then closes rather than
        report it as transient: the call that found out would fail, and a caller that
        retries with a new store (a Spark task is retried with its own client) would
        find out again and fail again, forever.  The refused multi-read never read
        anything, so the pipelined read after it is still the call's one try.
        """
        transitions = self._connection.transitions
        try:
            return self._get_multi_read(paths)
        except kx.UnimplementedError:
            # A server before 3.6 answers the unknown opcode UNIMPLEMENTED; every later call on
            # this store goes the old way without asking again.
            self.multi_read = False
            _log.warning("ZooKeeper at %s has no multi-read (before 3.6?): reading nodes one request each",
                         self._connection.url.connect_string)
            self._connection.await_new_connection(transitions)
            return self.get_pipelined(paths)

    def _get_multi_read(self, paths: list[str]) -> dict[str, Node | None]:
        """Chunks sized by the store's :class:`ChunkSizer`, up to ``MULTI_READ_IN_FLIGHT`` at once.

        Raises ``UnimplementedError`` untouched (the caller's cue to fall back);
        everything else is mapped as the single reads map it.
        """
        out: dict[str, Node | None] = {}
        pending: deque[tuple[list[str], Any]] = deque()
        start = 0
        while start < len(paths) or pending:
            while start < len(paths) and len(pending) < MULTI_READ_IN_FLIGHT:
                end = self._chunks.end_of_chunk(paths, start)
                chunk = paths[start:end]
                pending.append((chunk, self._connection.send(MultiRead(self._connection.server_paths(chunk)))))
                start = end
            chunk, reply = pending.popleft()
            try:
                results = self._connection.reply(reply)
            except kx.UnimplementedError:
                raise
            except KAZOO_ERRORS as e:
                raise map_error(e, chunk[0] if len(chunk) == 1 else f"{chunk[0]} (multi-read of {len(chunk)})") from e
            except MultiReadError as e:
                raise MetadataStoreError(f"ZooKeeper multi-read from {chunk[0]}: {e}") from e
            self.multi_read = True  # answered, even if some of its nodes could not be read
            self._chunks.observe(results)
            for path, result in zip(chunk, results, strict=True):
                if isinstance(result, kx.NoNodeError):
                    out[path] = None
                elif isinstance(result, Exception):
                    raise map_error(result, path) from result
                else:
                    data, stat = result
                    out[path] = Node(data, stat.version, stat.ctime, stat.cversion)
        return out

    def get_pipelined(self, paths: list[str]) -> dict[str, Node | None]:
        """One getData per path, all sent before the first reply is awaited (servers before 3.6)."""
        pending = [(p, self._connection.client.get_async(p)) for p in paths]
        out: dict[str, Node | None] = {}
        for path, result in pending:
            try:
                data, stat = self._connection.reply(result)
            except kx.NoNodeError:
                out[path] = None
            except KAZOO_ERRORS as e:
                raise map_error(e, path) from e
            else:
                out[path] = Node(data if data is not None else b"", stat.version, stat.ctime, stat.cversion)
        return out

    def children_many(self, paths: list[str]) -> dict[str, list[str]]:
        """Multi-read listings when the server has them (known from an earlier ``get_many``),
        else one pipelined ``getChildren`` per path; ``[]`` for an absent node.

        The delete phase lists the cursors of every managed ledger a batch
        touches; one round trip each made that listing most of a batch's time."""
        if not self._connection.connected:
            raise MetadataStoreUnavailable("ZooKeeper unavailable: not connected")
        if self.multi_read:
            return self._list_multi_read(paths)
        pending = [(p, self._connection.client.get_children_async(p)) for p in paths]
        out: dict[str, list[str]] = {}
        for path, result in pending:
            try:
                out[path] = sorted(self._connection.reply(result))
            except kx.NoNodeError:
                out[path] = []
            except KAZOO_ERRORS as e:
                raise map_error(e, path) from e
        return out

    def _list_multi_read(self, paths: list[str]) -> dict[str, list[str]]:
        chunks = [paths[i:i + MAX_LIST_OPS] for i in range(0, len(paths), MAX_LIST_OPS)]
        pending = [(chunk, self._connection.send(MultiListChildren(self._connection.server_paths(chunk))))
                   for chunk in chunks]
        out: dict[str, list[str]] = {}
        for chunk, reply in pending:
            try:
                results = self._connection.reply(reply)
            except KAZOO_ERRORS as e:
                raise map_error(e, f"{chunk[0]} (multi-read of {len(chunk)} listings)") from e
            except MultiReadError as e:
                raise MetadataStoreError(f"ZooKeeper multi-read listing from {chunk[0]}: {e}") from e
            for path, result in zip(chunk, results, strict=True):
                if isinstance(result, kx.NoNodeError):
                    out[path] = []
                elif isinstance(result, Exception):
                    raise map_error(result, path) from result
                else:
                    out[path] = sorted(result)
        return out
