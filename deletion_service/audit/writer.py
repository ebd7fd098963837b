"""Append records to the trail: one at a time, chained, under a file lock, rotated by size.

The order of an append is the point:

1. take the trail's file lock (``fcntl.flock`` on ``audit/.lock``): a data dir shared
   by mistake between two daemons (possible against a cluster, where no daemon.lock
   guards it) must never fork the chain;
2. read where the chain ends — the last line of the newest file — unless that file is
   exactly as this writer left it (same inode and size), so a restart, or another
   process's append, is continued from what is on disk and never from memory;
3. pick the file: the newest, or the next number when this record would take it past
   ``ledgerDeletionAuditFileMaxBytes`` (or when it ends inside a line: a crash cut a
   write short, and the damage is left where it is for ``audit verify`` to name);
4. append the line (``O_APPEND``) and fsync it — the record is durable before the
   anchor names it, so a crash leaves the anchor behind the trail, never ahead;
5. rewrite the anchor (``trail.py``), release the lock, then hand the line to the
   optional topic copy (``publish.py``), which can never hold up or fail an append.

A record that cannot be written (disk full, permissions) is logged at ERROR with
its whole content, and the request it describes stays settled: the delete already
happened, and refusing to record it would not undo that.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from deletion_service.audit import record, trail
from deletion_service.audit.publish import TopicCopy
from deletion_service.audit.record import Entry
from deletion_service.delete_phase.decision import Action, Outcome, outcome_of
from deletion_service.delete_phase.worker import Settled
from deletion_service.model import PendingDeleteLedgerInfo

_log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 64 * 1024 * 1024


class AuditWriter:
    def __init__(self, directory: Path, max_bytes: int = DEFAULT_MAX_BYTES, daemon: str | None = None,
                 publish: TopicCopy | None = None, clock: Callable[[], float] = time.time) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.daemon = daemon or record.daemon_instance()
        self.publish = publish
        self.clock = clock
        self._lock = threading.Lock()
        #: (file number, inode, size, seq, hash) as this writer left the trail
        self._known: tuple[int, int, int, int, str] | None = None

    def close(self) -> None:
        """Stop the topic copy (what it has queued is sent first, for a few seconds at most)."""
        if self.publish is not None:
            self.publish.close()

    # ---- the hooks

    def on_settled(self, settled: Settled) -> None:
        """The worker's hook: one record per settled message, undecodable ones included."""
        self.write(Entry.of(settled.request, settled.action, settled.outcome, settled.message))

    def on_sync(self, request: PendingDeleteLedgerInfo, action: Action) -> None:
        """The admin API's synchronous delete: recorded when it settled the request for good
        (deleted, absent, in use, mismatch); "not yet" and failures leave it to the caller."""
        outcome = outcome_of(action)
        if outcome in (Outcome.DELETED, Outcome.ABSENT, Outcome.STILL_IN_USE, Outcome.METADATA_MISMATCH):
            self.write(Entry.of(request, action, outcome))

    # ---- appending

    def write(self, entry: Entry) -> dict[str, Any] | None:
        """Append one record; the record written, or None when it could not be (logged at ERROR)."""
        try:
            written, text = self.append(entry)
        except OSError as e:
            _log.error("audit record NOT written to %s (%s): %s", self.directory, e,
                       record.line(record.build(entry, 0, int(self.clock() * 1000), self.daemon, "?")))
            return None
        if self.publish is not None:
            self.publish(text)
        return written

    def append(self, entry: Entry) -> tuple[dict[str, Any], str]:
        """Append one record under the locks (see the module docstring for the order); raises OSError."""
        with self._lock:
            self.directory.mkdir(parents=True, exist_ok=True)
            with self._flocked():
                n, seq, prev, size, fresh = self._chain_end()
                written = record.build(entry, seq + 1, int(self.clock() * 1000), self.daemon, prev)
                text = record.line(written)
                data = (text + "\n").encode()
                if fresh or n == 0 or (size > 0 and size + len(data) > self.max_bytes):
                    n, size = n + 1, 0
                path = trail.file_path(self.directory, n)
                ino = _append(path, data)
                if size == 0:
                    _fsync_dir(self.directory)  # a new file: its name must survive a crash too
                digest = record.digest(text)
                trail.write_anchor(self.directory, trail.Anchor(seq + 1, n, digest))
                self._known = (n, ino, size + len(data), seq + 1, digest)
        return written, text

    def _chain_end(self) -> tuple[int, int, str, int, bool]:
        """``(newest file, last seq, its hash, the file's size, start a new file)`` from disk,
        or from memory when the newest file is exactly as this writer left it."""
        newest = trail.files(self.directory)
        if newest and self._known is not None:
            n, path = newest[-1]
            stat = path.stat()
            known_n, known_ino, known_size, seq, digest = self._known
            if (n, stat.st_ino, stat.st_size) == (known_n, known_ino, known_size):
                return n, seq, digest, stat.st_size, False
        tail = trail.read_tail(self.directory)
        if tail.last is None:
            return tail.n, 0, "", tail.size, tail.partial
        try:
            seq = int(record.parse(tail.last)["seq"])
        except ValueError as e:
            raise OSError(f"the trail's last record is unreadable ({e}); run 'ledger-deletion audit verify'") from e
        if tail.partial:
            _log.warning("the newest audit file ends inside a record (a write was cut short): continuing from "
                         "seq %d in a new file; 'ledger-deletion audit verify' names the damaged record", seq)
        return tail.n, seq, record.digest(tail.last), tail.size, tail.partial

    @contextmanager
    def _flocked(self) -> Iterator[None]:
        fd = os.open(self.directory / trail.LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing drops the lock


def _append(path: Path, data: bytes) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, data)
        if written != len(data):
            raise OSError(f"short write to {path}: {written} of {len(data)} bytes")
        os.fsync(fd)
        return os.fstat(fd).st_ino
    finally:
        os.close(fd)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
