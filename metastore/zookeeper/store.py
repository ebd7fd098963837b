"""ZooKeeper backend (kazoo): the store real Pulsar and BookKeeper clusters use.

Why the care around sizes: ZooKeeper answers a request over ``jute.maxbuffer``
(1 MiB by default) by dropping the connection, which kazoo reports as
``ConnectionLoss`` — indistinguishable from a network blip, so a caller would
retry it forever.  Every write is measured first and refused with
:class:`RequestTooLargeError`; batched deletes are split to stay under it.

Connection and session losses become :class:`MetadataStoreUnavailable`
(transient); :class:`NotSentError` when the request was refused before it was
queued (not connected), so a caller knows it was not applied.  Every request
is tried once: retrying is the callers' decision
(:mod:`metastore.retry` for reads), made in one layer — a store that also
retried multiplied its callers' tries.  Writes are never worth retrying here
anyway: a write whose reply was lost may have been applied, and only the
caller can decide (by re-reading) what to do; ``delete_many`` does so
(:meth:`MetadataStore.delete_many`), syncing before it reads back.

The store is this module's single requests and writes over collaborators, one
concept a module: :mod:`metastore.zookeeper.connection` (connect, authenticate,
chroot, one request with a deadline), :mod:`metastore.zookeeper.batch_reads`
(``get_many``/``children_many`` by multi-read), :mod:`metastore.zookeeper.grouped_reads`
(``get`` from many threads at once, read together), :mod:`metastore.zookeeper.kazoo_errors`
(kazoo's errors as the store's).  kazoo is imported by these modules only.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

from kazoo import exceptions as kx

from metastore.interface import (
    ABSENT,
    ANY,
    BatchFate,
    CheckVersion,
    Delete,
    Leadership,
    MetadataStore,
    MultiOpError,
    Node,
    Op,
    Put,
    parent_of,
    validate_path,
)
from metastore.url import ZooKeeperUrl
from metastore.zookeeper.batch_reads import BatchReads
from metastore.zookeeper.connection import DIGEST_ENV, ZooKeeperConnection
from metastore.zookeeper.grouped_reads import GroupedReads
from metastore.zookeeper.kazoo_errors import KAZOO_ERRORS, describe, map_error
from metastore.zookeeper.leadership import ZooKeeperLeadership

__all__ = ["DELETE_MULTIS_IN_FLIGHT", "DIGEST_ENV", "ZooKeeperMetadataStore"]

#: Delete multis ``delete_many`` keeps in flight (each at most ``delete_many``'s batch size).
DELETE_MULTIS_IN_FLIGHT: Final = 8

_log = logging.getLogger(__name__)


class ZooKeeperMetadataStore(MetadataStore):
    """The :class:`MetadataStore` contract on ZooKeeper: single requests and writes here, the rest delegated."""

    def __init__(
        self,
        url: ZooKeeperUrl,
        digest_file: Path | None = None,
        connect_timeout_s: float = 5.0,
        session_timeout_s: float = 10.0,
    ) -> None:
        self.url = url
        self.connection = ZooKeeperConnection(url, digest_file, connect_timeout_s, session_timeout_s)
        self._client = self.connection.client
        self.batch_reads = BatchReads(self.connection)
        self._grouped = GroupedReads(self._get_one, self.batch_reads.get_many)

    # ---- reads

    def get(self, path: str) -> Node | None:
        """One node; threads that ask at the same time are read together (:mod:`metastore.zookeeper.grouped_reads`)."""
        validate_path(path)
        return self._grouped.get(path)

    def _get_one(self, path: str) -> Node | None:
        try:
            data, stat = self.connection.call(self._client.get_async, path)
        except kx.NoNodeError:
            return None
        except KAZOO_ERRORS as e:
            raise map_error(e, path) from e
        return Node(data if data is not None else b"", stat.version, stat.ctime, stat.cversion)

    def get_many(self, paths: Iterable[str]) -> dict[str, Node | None]:
        """Multi-reads of many nodes per request (:mod:`metastore.zookeeper.batch_reads`)."""
        paths = list(paths)
        for p in paths:
            validate_path(p)
        return self.batch_reads.get_many(paths)

    def children(self, path: str) -> list[str]:
        validate_path(path)
        try:
            return sorted(self.connection.call(self._client.get_children_async, path))
        except kx.NoNodeError:
            return []
        except KAZOO_ERRORS as e:
            raise map_error(e, path) from e

    def children_many(self, paths: Iterable[str]) -> dict[str, list[str]]:
        """Multi-read listings when the server has them (:mod:`metastore.zookeeper.batch_reads`)."""
        paths = list(dict.fromkeys(paths))
        for path in paths:
            validate_path(path)
        return self.batch_reads.children_many(paths)

    # ---- writes

    def put(self, path: str, data: bytes, expected_version: int) -> int:
        validate_path(path)
        self.check_request_size([Put(path, data, expected_version)])
        try:
            if expected_version == ABSENT:
                self._create(path, data)
                return 0
            try:
                stat = self.connection.call(self._client.set_async, path, data,
                                  -1 if expected_version == ANY else expected_version)
            except kx.NoNodeError:
                if expected_version != ANY:
                    raise
                self._create(path, data)
                return 0
            return stat.version
        except KAZOO_ERRORS as e:
            raise map_error(e, path) from e

    def delete(self, path: str, expected_version: int) -> None:
        validate_path(path)
        try:
            self.connection.call(self._client.delete_async, path, -1 if expected_version == ANY else expected_version)
        except KAZOO_ERRORS as e:
            raise map_error(e, path) from e

    def multi(self, ops: Sequence[Op]) -> list[int | None]:
        tx = self._transaction(ops)
        try:
            results = self.connection.call(tx.commit_async)
        except KAZOO_ERRORS as e:
            raise map_error(e, "multi-op") from e
        for i, (op, res) in enumerate(zip(ops, results, strict=True)):
            if isinstance(res, Exception) and not isinstance(res, kx.RolledBackError):
                raise MultiOpError(i, op, map_error(res, op.path))
        out: list[int | None] = []
        for op, res in zip(ops, results, strict=True):
            if isinstance(op, Put):
                out.append(res.version if hasattr(res, "version") else 0)  # create returns the path
            else:
                out.append(None)
        return out

    def _transaction(self, ops: Sequence[Op]) -> Any:  # noqa: ANN401 - kazoo's Transaction is untyped
        """A kazoo transaction of ``ops``, checked (paths, request size) and not yet committed."""
        for op in ops:
            validate_path(op.path)
        self.check_request_size(ops)
        # ZooKeeper's multi cannot create missing parents; parents are empty
        # containers, so making them first (outside the transaction) is harmless.
        for op in ops:
            if isinstance(op, Put) and op.expected_version in (ABSENT, ANY):
                self._ensure_parent(op.path)
        tx = self._client.transaction()
        for op in ops:
            if isinstance(op, CheckVersion):
                tx.check(op.path, op.version)
            elif isinstance(op, Delete):
                tx.delete(op.path, -1 if op.expected_version == ANY else op.expected_version)
            elif op.expected_version == ABSENT or (
                op.expected_version == ANY and self.get(op.path) is None
            ):
                tx.create(op.path, op.data)
            elif op.expected_version == ANY:
                tx.set_data(op.path, op.data, -1)
            else:
                tx.set_data(op.path, op.data, op.expected_version)
        return tx

    def _delete_batches(self, batches: Sequence[Sequence[tuple[str, int]]]) -> list[BatchFate]:
        """Up to ``DELETE_MULTIS_IN_FLIGHT`` delete multis sent before the first reply is awaited.

        One at a time, each multi waited for its own log sync; in flight together,
        ZooKeeper syncs them as one group.  Each is still atomic on its own.  A multi
        not sent (not connected) is ``NOT_SENT``; one sent whose reply never came
        (connection lost, timeout) is ``UNKNOWN``, for ``delete_many`` to read back."""
        fates: list[BatchFate] = []
        pending: deque[Any] = deque()
        for i, batch in enumerate(batches):
            if not self.connection.connected:
                pending.append(None)
            else:
                pending.append(self._transaction([Delete(p, v) for p, v in batch]).commit_async())
            if len(pending) >= DELETE_MULTIS_IN_FLIGHT or i == len(batches) - 1:
                while pending:
                    fates.append(self._await_deletes(pending.popleft()))
        return fates

    def _await_deletes(self, reply: Any) -> BatchFate:  # noqa: ANN401 - kazoo's IAsyncResult is untyped
        if reply is None:
            return BatchFate.NOT_SENT
        try:
            results = self.connection.reply(reply)
        except KAZOO_ERRORS as e:
            _log.warning("a delete multi-op's reply was lost (%s): reading its nodes back", describe(e))
            return BatchFate.UNKNOWN
        return BatchFate.REFUSED if any(isinstance(r, Exception) for r in results) else BatchFate.APPLIED

    def _read_after_writes(self, paths: Sequence[str]) -> dict[str, Node | None]:
        """A ``sync`` first: the server this session now talks to has then applied every write the
        leader committed before it, our lost multi included (a write of the session's old connection
        that reaches the leader after the session moved is refused: ZooKeeper's session-moved check)."""
        self.sync()
        return self.get_many(paths)

    def sync(self) -> None:
        try:
            self.connection.call(self._client.sync_async, "/")
        except KAZOO_ERRORS as e:
            raise map_error(e, "sync") from e

    def leadership(self, path: str, identifier: str) -> Leadership:
        """Elected with kazoo's lock recipe on this store's connection (:mod:`.leadership`)."""
        validate_path(path)
        return ZooKeeperLeadership(self._client, path, identifier)

    def close(self) -> None:
        self.connection.close()

    # ---- internals

    def _create(self, path: str, data: bytes) -> None:
        try:
            self.connection.call(self._client.create_async, path, data)
        except kx.NoNodeError:
            self._ensure_parent(path)
            self.connection.call(self._client.create_async, path, data)

    def _ensure_parent(self, path: str) -> None:
        """Create missing ancestors one by one (a concurrent creator is fine)."""
        parent = parent_of(path)
        if parent == "/":
            return
        missing = []
        while parent != "/":
            try:
                if self.connection.call(self._client.exists_async, parent) is not None:
                    break
            except KAZOO_ERRORS as e:
                raise map_error(e, parent) from e
            missing.append(parent)
            parent = parent_of(parent)
        for p in reversed(missing):
            try:
                self.connection.call(self._client.create_async, p, b"")
            except kx.NodeExistsError:
                pass
            except KAZOO_ERRORS as e:
                raise map_error(e, p) from e
