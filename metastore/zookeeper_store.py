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

Why ``get_many`` uses multi-reads (:mod:`metastore.zookeeper_multiread`): kazoo
costs ~250 µs of client CPU per request, so reading a cluster's ledger znodes one
request each is CPU-bound; a multi-read of up to a thousand nodes pays that once.
A server before 3.6 answers it ``UNIMPLEMENTED``; the store remembers that and
reads such a server the old way, one pipelined ``getData`` per node.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Final

from kazoo import exceptions as kx
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from kazoo.retry import KazooRetry

from metastore.interface import (
    ABSENT,
    ANY,
    BadVersionError,
    BatchFate,
    CheckVersion,
    Delete,
    MetadataStore,
    MetadataStoreError,
    MetadataStoreUnavailable,
    MultiOpError,
    Node,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    NotSentError,
    Op,
    Put,
    parent_of,
    validate_path,
)
from metastore.url import ZooKeeperUrl
from metastore.zookeeper_multiread import MAX_LIST_OPS, ChunkSizer, MultiListChildren, MultiRead, MultiReadError

DIGEST_ENV = "LEDGER_DELETION_METADATA_STORE_DIGEST"
#: Multi-reads one ``get_many`` keeps in flight: the server reads one chunk while the
#: client decodes the last, at ``REPLY_BUDGET`` bytes of replies each at most.
MULTI_READ_IN_FLIGHT: Final = 3
#: Delete multis ``delete_many`` keeps in flight (each at most ``delete_many``'s batch size).
DELETE_MULTIS_IN_FLIGHT: Final = 8
#: How long a server that refused a multi-read may take to drop the connection (ZooKeeper
#: closes it right after the reply) before the store takes it that the connection stays.
DROP_GRACE_S: Final = 1.0

_log = logging.getLogger(__name__)


class ZooKeeperMetadataStore(MetadataStore):
    def __init__(
        self,
        url: ZooKeeperUrl,
        digest_file: Path | None = None,
        connect_timeout_s: float = 5.0,
        session_timeout_s: float = 10.0,
    ) -> None:
        self.url = url
        hosts = ",".join(f"{h}:{p}" for h, p in url.hosts)
        self._client = KazooClient(
            hosts=hosts,
            timeout=session_timeout_s,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=2),
            command_retry=None,
        )
        try:
            # kazoo is unannotated: the checker takes ``start``'s default 15 for an int, though kazoo
            # only waits on an Event with it, which takes seconds as a float.
            self._client.start(timeout=connect_timeout_s)  # pyright: ignore[reportArgumentType]
        except KazooTimeoutError as e:
            self._client.close()
            raise MetadataStoreUnavailable(
                f"cannot connect to ZooKeeper at {hosts} within {connect_timeout_s:g}s: "
                "is it running and reachable? (check --metadata-store)"
            ) from e
        try:
            digest = _read_digest(digest_file)
            if digest:
                self._client.add_auth("digest", digest)
            if url.chroot:
                self._client.ensure_path(url.chroot)
                self._client.chroot = url.chroot
        except (kx.KazooException, MetadataStoreError) as e:
            self._client.stop()
            self._client.close()
            if isinstance(e, MetadataStoreError):
                raise
            raise MetadataStoreUnavailable(f"ZooKeeper at {hosts}: {_describe(e)}") from e
        self._op_timeout_s = session_timeout_s
        #: Whether the server answers multi-reads: unknown until the first one is answered.
        self._multi_read: bool | None = None
        self._probing = threading.Lock()
        self._chunks = ChunkSizer()
        #: Connection state changes seen (SUSPENDED, LOST, CONNECTED), under ``_state_changed``.
        self._transitions = 0
        self._state_changed = threading.Condition()
        self._client.add_listener(self._on_state)

    def _call(self, fn_async: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:  # noqa: ANN401 - kazoo's async API is untyped
        """Run one request, once, with a deadline.

        kazoo's synchronous calls wait without a deadline while the server is
        away; a daemon must fail fast instead and let its retry policy decide.
        Not connected (e.g. mid-reconnect) fails at once, as ``ConnectionLoss``.
        """
        if self._client.state != KazooState.CONNECTED:
            raise _NotConnected("not connected to ZooKeeper")
        return self._reply(fn_async(*args, **kwargs))

    def _reply(self, result: Any) -> Any:  # noqa: ANN401 - kazoo's IAsyncResult and its values are untyped
        """A sent request's reply (data and stat, children, a stat), waited for until the operation deadline."""
        return result.get(timeout=self._op_timeout_s)

    # ---- reads

    def get(self, path: str) -> Node | None:
        validate_path(path)
        try:
            data, stat = self._call(self._client.get_async, path)
        except kx.NoNodeError:
            return None
        except (kx.KazooException, KazooTimeoutError) as e:
            raise _map(e, path) from e
        return Node(data if data is not None else b"", stat.version, stat.ctime)

    def get_many(self, paths: Iterable[str]) -> dict[str, Node | None]:
        """Multi-reads of many nodes per request; pipelined single reads on a server without them.

        Why: kazoo's client CPU per request (~250 µs) made reading 100k nodes one
        request each CPU-bound; a multi-read pays it once per chunk.  The answer is
        what the single reads give — ``None`` for an absent node — and the first
        node (in the order given) that cannot be read raises as ``get`` would, so a
        caller reading node by node after a failed batch sees the same errors.
        """
        paths = list(paths)
        for p in paths:
            validate_path(p)
        if self._client.state != KazooState.CONNECTED:
            raise MetadataStoreUnavailable("ZooKeeper unavailable: not connected")
        if not paths or self._multi_read is False:
            return self._get_pipelined(paths)
        if self._multi_read is None:
            with self._probing:  # one thread finds out; the others then know, connection back
                if self._multi_read is None:
                    return self._probe(paths)
            if self._multi_read is False:
                return self._get_pipelined(paths)
        return self._get_multi_read(paths)

    def _probe(self, paths: list[str]) -> dict[str, Node | None]:
        """The store's first multi-read, which tells whether the server has them."""
        transitions = self._transitions
        try:
            return self._get_multi_read(paths)
        except kx.UnimplementedError:
            # A server before 3.6 answers the unknown opcode UNIMPLEMENTED; every later call on
            # this store goes the old way without asking again.
            self._multi_read = False
            _log.warning("ZooKeeper at %s has no multi-read (before 3.6?): reading nodes one request each",
                         self.url.connect_string)
            self._await_new_connection(transitions)
            return self._get_pipelined(paths)

    def _await_new_connection(self, transitions: int) -> None:
        """Wait out the connection ZooKeeper closes after answering UNIMPLEMENTED.

        Why not just report it as transient: the call that found out would fail, and
        a caller that retries with a new store (a Spark task is retried with its own
        client) would find out again and fail again, forever.  The refused multi-read
        never read anything, so the pipelined read after it is still the call's one
        try.  A server that keeps the connection shows no state change within
        ``DROP_GRACE_S``; one that drops it must be back within the request timeout.
        """
        with self._state_changed:
            if not self._state_changed.wait_for(lambda: self._transitions > transitions, DROP_GRACE_S):
                return
            if not self._state_changed.wait_for(lambda: self._client.state == KazooState.CONNECTED,
                                                self._op_timeout_s):
                raise MetadataStoreUnavailable(
                    f"ZooKeeper at {self.url.connect_string} closed the connection after refusing a "
                    "multi-read and is not back yet; later reads use one request per node")

    def _on_state(self, state: KazooState) -> None:
        """kazoo's state listener (its connection thread): count transitions for ``_await_new_connection``."""
        with self._state_changed:
            self._transitions += 1
            self._state_changed.notify_all()

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
                pending.append((chunk, self._send_multi_read(chunk)))
                start = end
            chunk, reply = pending.popleft()
            try:
                results = reply.get(timeout=self._op_timeout_s)
            except kx.UnimplementedError:
                raise
            except (kx.KazooException, KazooTimeoutError) as e:
                raise _map(e, chunk[0] if len(chunk) == 1 else f"{chunk[0]} (multi-read of {len(chunk)})") from e
            except MultiReadError as e:
                raise MetadataStoreError(f"ZooKeeper multi-read from {chunk[0]}: {e}") from e
            self._multi_read = True  # answered, even if some of its nodes could not be read
            self._chunks.observe(results)
            for path, result in zip(chunk, results, strict=True):
                if isinstance(result, kx.NoNodeError):
                    out[path] = None
                elif isinstance(result, Exception):
                    raise _map(result, path) from result
                else:
                    data, stat = result
                    out[path] = Node(data, stat.version, stat.ctime)
        return out

    def _send_multi_read(self, chunk: list[str]) -> Any:  # noqa: ANN401 - kazoo's IAsyncResult is untyped
        return self._send(MultiRead(self._server_paths(chunk)))

    def _server_paths(self, chunk: list[str]) -> list[str]:
        """The chroot applied, as kazoo applies it to its own requests' paths."""
        root = self._client.chroot or ""
        return [root + p if p != "/" else (root or "/") for p in chunk]

    def _send(self, request: MultiRead | MultiListChildren) -> Any:  # noqa: ANN401 - kazoo's IAsyncResult
        """Queue a request kazoo does not know on its connection, as kazoo queues its own.

        kazoo has no public call for a request type it does not know; ``_call`` is
        the one door every kazoo request goes through (state checks, queue, wake-up)."""
        reply = self._client.handler.async_result()
        self._client._call(request, reply)
        return reply

    def _get_pipelined(self, paths: list[str]) -> dict[str, Node | None]:
        """One getData per path, all sent before the first reply is awaited (servers before 3.6)."""
        pending = [(p, self._client.get_async(p)) for p in paths]
        out: dict[str, Node | None] = {}
        for path, result in pending:
            try:
                data, stat = self._reply(result)
            except kx.NoNodeError:
                out[path] = None
            except (kx.KazooException, KazooTimeoutError) as e:
                raise _map(e, path) from e
            else:
                out[path] = Node(data if data is not None else b"", stat.version, stat.ctime)
        return out

    def children(self, path: str) -> list[str]:
        validate_path(path)
        try:
            return sorted(self._call(self._client.get_children_async, path))
        except kx.NoNodeError:
            return []
        except (kx.KazooException, KazooTimeoutError) as e:
            raise _map(e, path) from e

    def children_many(self, paths: Iterable[str]) -> dict[str, list[str]]:
        """Multi-read listings when the server has them (known from an earlier ``get_many``),
        else one pipelined ``getChildren`` per path; ``[]`` for an absent node.

        The delete phase lists the cursors of every managed ledger a batch
        touches; one round trip each made that listing most of a batch's time."""
        paths = list(dict.fromkeys(paths))
        for path in paths:
            validate_path(path)
        if self._client.state != KazooState.CONNECTED:
            raise MetadataStoreUnavailable("ZooKeeper unavailable: not connected")
        if self._multi_read:
            return self._list_multi_read(paths)
        pending = [(p, self._client.get_children_async(p)) for p in paths]
        out: dict[str, list[str]] = {}
        for path, result in pending:
            try:
                out[path] = sorted(self._reply(result))
            except kx.NoNodeError:
                out[path] = []
            except (kx.KazooException, KazooTimeoutError) as e:
                raise _map(e, path) from e
        return out

    def _list_multi_read(self, paths: list[str]) -> dict[str, list[str]]:
        chunks = [paths[i:i + MAX_LIST_OPS] for i in range(0, len(paths), MAX_LIST_OPS)]
        pending = [(chunk, self._send(MultiListChildren(self._server_paths(chunk)))) for chunk in chunks]
        out: dict[str, list[str]] = {}
        for chunk, reply in pending:
            try:
                results = reply.get(timeout=self._op_timeout_s)
            except (kx.KazooException, KazooTimeoutError) as e:
                raise _map(e, f"{chunk[0]} (multi-read of {len(chunk)} listings)") from e
            except MultiReadError as e:
                raise MetadataStoreError(f"ZooKeeper multi-read listing from {chunk[0]}: {e}") from e
            for path, result in zip(chunk, results, strict=True):
                if isinstance(result, kx.NoNodeError):
                    out[path] = []
                elif isinstance(result, Exception):
                    raise _map(result, path) from result
                else:
                    out[path] = sorted(result)
        return out

    # ---- writes

    def put(self, path: str, data: bytes, expected_version: int) -> int:
        validate_path(path)
        self.check_request_size([Put(path, data, expected_version)])
        try:
            if expected_version == ABSENT:
                self._create(path, data)
                return 0
            try:
                stat = self._call(self._client.set_async, path, data,
                                  -1 if expected_version == ANY else expected_version)
            except kx.NoNodeError:
                if expected_version != ANY:
                    raise
                self._create(path, data)
                return 0
            return stat.version
        except (kx.KazooException, KazooTimeoutError) as e:
            raise _map(e, path) from e

    def delete(self, path: str, expected_version: int) -> None:
        validate_path(path)
        try:
            self._call(self._client.delete_async, path, -1 if expected_version == ANY else expected_version)
        except (kx.KazooException, KazooTimeoutError) as e:
            raise _map(e, path) from e

    def multi(self, ops: Sequence[Op]) -> list[int | None]:
        tx = self._transaction(ops)
        try:
            results = self._call(tx.commit_async)
        except (kx.KazooException, KazooTimeoutError) as e:
            raise _map(e, "multi-op") from e
        for i, (op, res) in enumerate(zip(ops, results, strict=True)):
            if isinstance(res, Exception) and not isinstance(res, kx.RolledBackError):
                raise MultiOpError(i, op, _map(res, op.path))
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
            if self._client.state != KazooState.CONNECTED:
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
            results = reply.get(timeout=self._op_timeout_s)
        except (kx.KazooException, KazooTimeoutError) as e:
            _log.warning("a delete multi-op's reply was lost (%s): reading its nodes back", _describe(e))
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
            self._call(self._client.sync_async, "/")
        except (kx.KazooException, KazooTimeoutError) as e:
            raise _map(e, "sync") from e

    def close(self) -> None:
        try:
            self._client.stop()
        finally:
            self._client.close()

    # ---- internals

    def _create(self, path: str, data: bytes) -> None:
        try:
            self._call(self._client.create_async, path, data)
        except kx.NoNodeError:
            self._ensure_parent(path)
            self._call(self._client.create_async, path, data)

    def _ensure_parent(self, path: str) -> None:
        """Create missing ancestors one by one (a concurrent creator is fine)."""
        parent = parent_of(path)
        if parent == "/":
            return
        missing = []
        while parent != "/":
            try:
                if self._call(self._client.exists_async, parent) is not None:
                    break
            except (kx.KazooException, KazooTimeoutError) as e:
                raise _map(e, parent) from e
            missing.append(parent)
            parent = parent_of(parent)
        for p in reversed(missing):
            try:
                self._call(self._client.create_async, p, b"")
            except kx.NodeExistsError:
                pass
            except (kx.KazooException, KazooTimeoutError) as e:
                raise _map(e, p) from e


def _read_digest(digest_file: Path | None) -> str | None:
    if digest_file is not None:
        try:
            value = Path(digest_file).read_text().strip()
        except OSError as e:
            raise MetadataStoreError(f"cannot read ZooKeeper digest file {digest_file}: {e.strerror}") from e
    else:
        value = os.environ.get(DIGEST_ENV, "").strip()
        if not value:
            return None
    if ":" not in value:
        raise MetadataStoreError("ZooKeeper digest secret must be 'user:password'")
    return value


def _describe(e: BaseException) -> str:
    return type(e).__name__ + (f": {e}" if str(e) else "")


class _NotConnected(kx.ConnectionLoss):
    """Refused by this store before the request was queued: it never reached the server."""


def _map(e: BaseException, path: str) -> MetadataStoreError:
    if isinstance(e, _NotConnected):
        return NotSentError(f"ZooKeeper unavailable while accessing {path}: not connected (nothing sent)")
    if isinstance(e, kx.NoNodeError):
        return NoNodeError(f"{path} does not exist")
    if isinstance(e, kx.NodeExistsError):
        return NodeExistsError(f"{path} already exists")
    if isinstance(e, kx.BadVersionError):
        return BadVersionError(f"{path} changed since it was read (version mismatch)")
    if isinstance(e, kx.NotEmptyError):
        return NotEmptyError(f"{path} has children")
    if isinstance(e, kx.NoAuthError | kx.AuthFailedError):
        return MetadataStoreError(f"ZooKeeper refused access to {path}: check the digest credentials")
    if isinstance(e, kx.ConnectionLoss | kx.SessionExpiredError | kx.ConnectionClosedError
                  | kx.OperationTimeoutError | KazooTimeoutError | kx.ZookeeperStoppedError):
        return MetadataStoreUnavailable(f"ZooKeeper unavailable while accessing {path}: {_describe(e)}")
    return MetadataStoreError(f"ZooKeeper error on {path}: {_describe(e)}")
