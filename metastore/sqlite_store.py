"""The embedded metadata store: one SQLite file with ZooKeeper's semantics.

The embedded mode and the tests need the same versions, CAS and atomic
multi-ops as ZooKeeper so that the protocol code cannot tell them apart.  Every
write runs in a ``BEGIN IMMEDIATE`` transaction (SQLite's writer lock), so
several threads and several processes can share one file; WAL mode lets
readers proceed while one writer holds the lock.  A write either commits or is
rolled back before the call returns, so an unavailable store (busy past the
timeout, I/O error) is always :class:`NotSentError`: nothing applied.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path

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
    NotSentError,
    Op,
    Put,
    parent_of,
    validate_path,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    path    TEXT PRIMARY KEY,
    parent  TEXT NOT NULL,
    data    BLOB NOT NULL,
    version INTEGER NOT NULL,
    ctime   INTEGER NOT NULL,
    mtime   INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS nodes_parent ON nodes(parent);
"""


class SqliteMetadataStore(MetadataStore):
    def __init__(self, path: Path, busy_timeout_s: float = 30.0, create: bool = True) -> None:
        """``create`` False: a missing file is an error.  Read-only commands pass it, so a
        mistyped path fails instead of leaving an empty database that answers "no node"."""
        self.path = Path(path)
        if not create and not self.path.is_file():
            raise MetadataStoreUnavailable(f"no SQLite metadata store at {self.path}: check the path "
                                           "(read-only commands never create one)")
        try:
            if create:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            # One connection per store object, shared by threads under a lock:
            # sqlite3 connections are not safe for concurrent use.
            self._conn = sqlite3.connect(
                str(self.path), timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
            )
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.executescript(_SCHEMA)
        except (sqlite3.Error, OSError) as e:
            raise MetadataStoreUnavailable(f"cannot open SQLite metadata store {self.path}: {e}") from e
        self._lock = threading.RLock()

    # ---- reads

    def get(self, path: str) -> Node | None:
        validate_path(path)
        with self._lock:
            row = self._q("SELECT data, version, ctime FROM nodes WHERE path=?", (path,)).fetchone()
        return Node(bytes(row[0]), row[1], row[2]) if row else None

    def children(self, path: str) -> list[str]:
        validate_path(path)
        with self._lock:
            rows = self._q("SELECT path FROM nodes WHERE parent=? ORDER BY path", (path,)).fetchall()
        return sorted(r[0].rsplit("/", 1)[1] for r in rows)

    # ---- writes

    def put(self, path: str, data: bytes, expected_version: int) -> int:
        return self._write([Put(path, bytes(data), expected_version)], atomic_error=False)[0]  # type: ignore[return-value]

    def delete(self, path: str, expected_version: int) -> None:
        self._write([Delete(path, expected_version)], atomic_error=False)

    def multi(self, ops: Sequence[Op]) -> list[int | None]:
        return self._write(list(ops), atomic_error=True)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # ---- internals

    def _q(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        try:
            return self._conn.execute(sql, args)
        except sqlite3.OperationalError as e:
            raise MetadataStoreUnavailable(f"SQLite metadata store {self.path}: {e}") from e

    def _write(self, ops: list[Op], atomic_error: bool) -> list[int | None]:
        for op in ops:
            validate_path(op.path)
        self.check_request_size(ops)
        with self._lock:
            try:
                self._q("BEGIN IMMEDIATE")
            except MetadataStoreUnavailable as e:
                raise NotSentError(str(e)) from e
            try:
                results = []
                for i, op in enumerate(ops):
                    try:
                        results.append(self._apply(op))
                    except MetadataStoreError as e:
                        if atomic_error:
                            raise MultiOpError(i, op, e) from e
                        raise
                self._q("COMMIT")  # inside: a failed commit is rolled back, never left open
            except BaseException as e:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                if isinstance(e, MetadataStoreUnavailable):  # a write here either commits or is rolled back
                    raise NotSentError(str(e)) from e
                raise
            return results

    def _apply(self, op: Op) -> int | None:
        row = self._conn.execute("SELECT version FROM nodes WHERE path=?", (op.path,)).fetchone()
        current = row[0] if row else None
        if isinstance(op, CheckVersion):
            if current is None:
                raise NoNodeError(f"{op.path} does not exist")
            if current != op.version:
                raise BadVersionError(f"{op.path} is at version {current}, expected {op.version}")
            return None
        if isinstance(op, Delete):
            if current is None:
                raise NoNodeError(f"{op.path} does not exist")
            if op.expected_version != ANY and current != op.expected_version:
                raise BadVersionError(f"{op.path} is at version {current}, expected {op.expected_version}")
            if self._conn.execute("SELECT 1 FROM nodes WHERE parent=? LIMIT 1", (op.path,)).fetchone():
                raise NotEmptyError(f"{op.path} has children")
            self._conn.execute("DELETE FROM nodes WHERE path=?", (op.path,))
            return None
        now = int(time.time() * 1000)
        if current is None:
            if op.expected_version not in (ABSENT, ANY):
                raise NoNodeError(f"{op.path} does not exist (expected version {op.expected_version})")
            self._ensure_parents(op.path, now)
            self._conn.execute(
                "INSERT INTO nodes(path, parent, data, version, ctime, mtime) VALUES (?,?,?,0,?,?)",
                (op.path, parent_of(op.path), op.data, now, now),
            )
            return 0
        if op.expected_version == ABSENT:
            raise NodeExistsError(f"{op.path} already exists")
        if op.expected_version != ANY and current != op.expected_version:
            raise BadVersionError(f"{op.path} is at version {current}, expected {op.expected_version}")
        self._conn.execute(
            "UPDATE nodes SET data=?, version=version+1, mtime=? WHERE path=?", (op.data, now, op.path)
        )
        return current + 1

    def _ensure_parents(self, path: str, now: int) -> None:
        parent = parent_of(path)
        missing = []
        while parent != "/":
            if self._conn.execute("SELECT 1 FROM nodes WHERE path=?", (parent,)).fetchone():
                break
            missing.append(parent)
            parent = parent_of(parent)
        for p in reversed(missing):
            self._conn.execute(
                "INSERT INTO nodes(path, parent, data, version, ctime, mtime) VALUES (?,?,x'',0,?,?)",
                (p, parent_of(p), now, now),
            )
