"""ZooKeeper backend (kazoo): the store real Pulsar and BookKeeper clusters use.

Why the care around sizes: ZooKeeper answers a request over ``jute.maxbuffer``
(1 MiB by default) by dropping the connection, which kazoo reports as
``ConnectionLoss`` — indistinguishable from a network blip, so a caller would
retry it forever.  Every write is measured first and refused with
:class:`RequestTooLargeError`; batched deletes are split to stay under it.

Connection and session losses become :class:`MetadataStoreUnavailable`
(transient).  Every request is tried once: retrying is the callers' decision
(:mod:`metastore.retry` for reads), made in one layer — a store that also
retried multiplied its callers' tries.  Writes are never worth retrying here
anyway: a write whose reply was lost may have been applied, and only the
caller can decide (by re-reading) what to do.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from kazoo import exceptions as kx
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from kazoo.retry import KazooRetry

from metastore.interface import (
    ABSENT,
    ANY,
    BadVersionError,
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
    Op,
    Put,
    parent_of,
    validate_path,
)
from metastore.url import ZooKeeperUrl

DIGEST_ENV = "LEDGER_DELETION_METADATA_STORE_DIGEST"


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
            self._client.start(timeout=connect_timeout_s)
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

    def _call(self, fn_async, *args, **kwargs):  # noqa: ANN001, ANN202 - kazoo's async API is untyped
        """Run one request, once, with a deadline.

        kazoo's synchronous calls wait without a deadline while the server is
        away; a daemon must fail fast instead and let its retry policy decide.
        Not connected (e.g. mid-reconnect) fails at once, as ``ConnectionLoss``.
        """
        if self._client.state != KazooState.CONNECTED:
            raise kx.ConnectionLoss("not connected to ZooKeeper")
        return fn_async(*args, **kwargs).get(timeout=self._op_timeout_s)

    # ---- reads

    def get(self, path: str) -> Node | None:
        validate_path(path)
        try:
            data, stat = self._call(self._client.get_async, path)
        except kx.NoNodeError:
            return None
        except (kx.KazooException, KazooTimeoutError) as e:
            raise _map(e, path) from e
        return Node(data, stat.version, stat.ctime)

    def get_many(self, paths: Iterable[str]) -> dict[str, Node | None]:
        """Pipelined: all requests go out before the first reply is awaited."""
        paths = list(paths)
        for p in paths:
            validate_path(p)
        if self._client.state != KazooState.CONNECTED:
            raise MetadataStoreUnavailable("ZooKeeper unavailable: not connected")
        pending = [(p, self._client.get_async(p)) for p in paths]
        out: dict[str, Node | None] = {}
        for path, result in pending:
            try:
                data, stat = result.get(timeout=self._op_timeout_s)
            except kx.NoNodeError:
                out[path] = None
            except (kx.KazooException, KazooTimeoutError) as e:
                raise _map(e, path) from e
            else:
                out[path] = Node(data, stat.version, stat.ctime)
        return out

    def children(self, path: str) -> list[str]:
        validate_path(path)
        try:
            return sorted(self._call(self._client.get_children_async, path))
        except kx.NoNodeError:
            return []
        except (kx.KazooException, KazooTimeoutError) as e:
            raise _map(e, path) from e

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


def _map(e: BaseException, path: str) -> MetadataStoreError:
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
