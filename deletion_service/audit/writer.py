"""Append records to the trail: a batch at a time, chained, under a file lock, rotated by size.

A batch is the records of the messages one pass of the worker settles: each has its
own line, ``seq`` and ``prev`` exactly as if appended alone, but the batch takes the
lock, reads where the chain ends and writes each file once (a profile of the daemon
found the per-record lock, directory listing, ``stat`` and ``open``/``write``/``close``
were a third of the delete-phase thread's time).  The order of an append is the point:

1. take the trail's file lock (``fcntl.flock`` on ``audit/anchor``): a data dir shared
   by mistake between two daemons (possible against a cluster, where no daemon.lock
   guards it) must never fork the chain;
2. read where the chain ends — the last line of the newest file — unless that file is
   exactly as this writer left it (same inode and size), so a restart, or another
   process's append, is continued from what is on disk and never from memory; a trail
   without records gets its first anchor (seq 0) now, durably, before its first record;
3. pick the file: the newest, or the next number when this record would take it past
   ``ledgerDeletionAuditFileMaxBytes`` (or when it ends inside a line: a crash cut a
   write short, and the damage is left where it is for ``audit verify`` to name);
4. append the lines (one ``O_APPEND`` write per file the batch touches), release the
   lock, then hand each line to the optional topic copy (``publish.py``), which can
   never hold up or fail an append;
5. group commit: a flusher thread fsyncs the newest file at most ``sync_interval_s``
   after an append (a file being left for the next one is fsynced at once), and only
   then rewrites the anchor (``trail.py``) — so the anchor names only durable records,
   and a crash leaves it behind the trail, never ahead.

Why a group commit: the daemon settles thousands of requests a second, and an fsync
(plus the anchor's) per record cost ~3 ms here, a tenfold slowdown.  A killed process
loses nothing (its writes are in the page cache); a machine that loses power loses at
most the last ``sync_interval_s`` of records; ``close()`` syncs at once.  Writing a
batch in one ``write`` changes none of that: the worker acks none of the batch's
messages before the whole batch is written, a crash before the write leaves them all
unacked (redelivered, recorded again: a record may repeat, never be lost), and a write
cut short by a power loss ends inside a line, which the next append and ``verify``
already handle.

A record the worker's hook cannot write (disk full, permissions, the lock held elsewhere for
``LOCK_WAIT_S``) leaves its message unacked, recorded on its next try, and the worker deletes
nothing more until a record is written again (:class:`RecordsNotWritten`): the delete already
happened, but the next ones need not happen unrecorded.  Elsewhere (the admin API's synchronous
delete) a record that cannot be written is logged at ERROR with its whole content.

A writer never repairs the evidence of damage.  Reading the chain's end from disk, it
checks the anchor the way ``verify`` does: missing or empty while the trail holds
records (removed or emptied), unreadable, or naming a record past the trail's end
(records cut off).  Then it goes on appending — deletes still happen and must be
recorded — but never writes the anchor again, and logs it at ERROR: rewriting the
anchor to name its own new end would make a truncated trail pass ``audit verify``.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deletion_service.audit import record, trail
from deletion_service.audit.publish import TopicCopy, audit_topic
from deletion_service.audit.record import Entry
from deletion_service.broker.interface import BrokerClient
from deletion_service.config import DeletionConfig
from deletion_service.delete_phase.rules.decision import Action
from deletion_service.delete_phase.rules.outward import outward
from deletion_service.protocol.request import PendingDeleteLedgerInfo

if TYPE_CHECKING:
    from deletion_service.delete_phase.consumer.worker import Settled

_log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
#: How long an append waits for the trail's file lock before it fails (its records are then retried).
LOCK_WAIT_S = 5.0
LOCK_POLL_S = 0.01
#: How often a trail that keeps refusing records is said at ERROR.
REFUSED_SAID_EVERY_S = 60.0


class AuditWriter:
    def __init__(self, directory: Path, max_bytes: int = DEFAULT_MAX_BYTES, daemon: str | None = None,
                 publish: TopicCopy | None = None, clock: Callable[[], float] = time.time,
                 sync_interval_s: float = 0.05) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.daemon = daemon or record.daemon_instance()
        self.publish = publish
        self.clock = clock
        self.sync_interval_s = sync_interval_s  # 0: fsync every record before the append returns
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        #: (file number, inode, size, seq, hash) as this writer left the trail
        self._known: tuple[int, int, int, int, str] | None = None
        #: the newest record appended and not yet fsynced: its file and the anchor naming it
        self._unsynced: tuple[Path, trail.Anchor] | None = None
        #: why the anchor is left as found (damage seen on disk), or None while it is kept
        self.anchor_damage: str | None = None
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._flusher: threading.Thread | None = None
        self._refused_said_at: float | None = None  # monotonic, when a refused append was last said at ERROR
        self.refusing: str | None = None  # why the last append failed, until one succeeds

    def close(self) -> None:
        """Sync what was appended, stop the flusher, then the topic copy (which sends what it has queued)."""
        self._closed.set()
        self._wake.set()
        if self._flusher is not None:
            self._flusher.join(5.0)
        self.flush()
        if self.publish is not None:
            self.publish.close()

    # ---- the hooks

    def on_settled(self, settled: Sequence[Settled]) -> None:
        """The worker's hook (``Hooks.record``): one record per message of a batch it settles, undecodable
        ones included, appended together before any is acked.  Raises :class:`RecordsNotWritten` when the
        trail refuses them: those stay unacked, and nothing more is deleted until a record is written."""
        entries = [Entry.of(s.request, s.action, s.outcome, s.message) for s in settled]
        written: list[tuple[dict[str, Any], str]] = []
        try:
            self.append_all(entries, written)
        except Exception as e:  # noqa: BLE001 - every failure to append is the same for the worker
            self._publish(written)
            why = f"the audit trail in {self.directory} cannot be written ({type(e).__name__}: {e})"
            now = time.monotonic()
            if self._refused_said_at is None or now - self._refused_said_at >= REFUSED_SAID_EVERY_S:
                self._refused_said_at = now
                _log.error("%s: %d record(s) not written; their requests stay unacked and are recorded once it "
                           "can be, and nothing more is deleted until then", why, len(entries) - len(written))
            from deletion_service.delete_phase.consumer.disposer import RecordsNotWritten  # dlq commands skip it
            raise RecordsNotWritten(len(written), why) from e
        self._publish(written)
        if self._refused_said_at is not None:
            self._refused_said_at = None
            _log.warning("the audit trail in %s can be written again: deleting again", self.directory)

    def on_sync(self, request: PendingDeleteLedgerInfo, action: Action) -> None:
        """The admin API's synchronous delete: recorded when it settled the request for good
        (deleted, absent, in use, mismatch); "not yet" and failures leave it to the caller."""
        out = outward(action)
        if out.final:
            self.write(Entry.of(request, action, out.outcome))

    # ---- appending

    def write(self, entry: Entry) -> dict[str, Any] | None:
        """Append one record; the record written, or None when it could not be (see :meth:`write_all`)."""
        return self.write_all([entry])[0]

    def write_all(self, entries: Sequence[Entry]) -> list[dict[str, Any] | None]:
        """Append the records in order; each record written, or None where it could not be (logged
        at ERROR, whole).  Never raises: it runs inside the worker's disposal, after the storage
        deletes and before the acks (a crash in between repeats the records when the messages are
        redelivered; none is lost)."""
        written: list[tuple[dict[str, Any], str]] = []
        try:
            self.append_all(entries, written)
        except Exception as e:  # noqa: BLE001 - a lost record is logged whole; the consumer goes on
            for entry in entries[len(written):]:
                _log.error("audit record NOT written to %s (%s): %s", self.directory, e,
                           record.line(record.build(entry, 0, int(self.clock() * 1000), self.daemon, "?")))
        self._publish(written)
        return [rec for rec, _ in written] + [None] * (len(entries) - len(written))

    def _publish(self, written: list[tuple[dict[str, Any], str]]) -> None:
        if self.publish is not None:
            for _, text in written:
                self.publish(text)

    def append(self, entry: Entry) -> tuple[dict[str, Any], str]:
        """Append one record under the locks; raises OSError."""
        written: list[tuple[dict[str, Any], str]] = []
        self.append_all([entry], written)
        return written[0]

    def append_all(self, entries: Sequence[Entry], written: list[tuple[dict[str, Any], str]]) -> None:
        """Append the records under the locks (the module docstring's order), adding each to ``written`` once
        its file's write returned; raises OSError (:attr:`refusing` says why until an append succeeds)."""
        if not entries:
            return
        try:
            self._append_all(entries, written)
        except Exception as e:
            self.refusing = f"the audit trail in {self.directory} cannot be written ({type(e).__name__}: {e})"
            raise
        self.refusing = None

    def writable(self) -> str | None:
        """Why a record could not be appended now (the lock held elsewhere, the newest file or the directory
        not writable), or None; asked before a synchronous delete.  A full disk shows only in :attr:`refusing`."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with self._lock, flocked(self.directory):
                files = trail.files(self.directory)
                if files:
                    os.close(os.open(files[-1][1], os.O_WRONLY | os.O_APPEND))
                elif not os.access(self.directory, os.W_OK):
                    raise OSError(f"{self.directory} is not writable")
        except OSError as e:
            return f"the audit trail in {self.directory} cannot be written ({type(e).__name__}: {e})"
        return None

    def _append_all(self, entries: Sequence[Entry], written: list[tuple[dict[str, Any], str]]) -> None:
        with self._lock:
            if self._known is None:
                self.directory.mkdir(parents=True, exist_ok=True)
            with flocked(self.directory):
                n, seq, prev, size, fresh = self._chain_end()
                if seq == 0 and self.anchor_damage is None and \
                        trail.anchor_file(self.directory) != trail.AnchorFile.WRITTEN:
                    trail.write_anchor(self.directory, trail.GENESIS, durable=True)  # before the first record
                at_ms = int(self.clock() * 1000)
                run: list[tuple[dict[str, Any], str]] = []  # records for file n, not written yet
                run_bytes: list[bytes] = []
                run_start = size
                for entry in entries:
                    rec = record.build(entry, seq + 1, at_ms, self.daemon, prev)
                    text = record.built_line(rec)
                    raw = text.encode()
                    data = raw + b"\n"
                    if fresh or n == 0 or (size > 0 and size + len(data) > self.max_bytes):
                        self._write_run(n, run_start, run, run_bytes, written)
                        n, size, fresh = n + 1, 0, False
                        run, run_bytes, run_start = [], [], 0
                    run.append((rec, text))
                    run_bytes.append(data)
                    size += len(data)
                    seq, prev = seq + 1, record.digest(raw)
                self._write_run(n, run_start, run, run_bytes, written)
            if self.sync_interval_s <= 0:
                self.flush()
            else:
                self._start_flusher()

    def _write_run(self, n: int, start_size: int, run: list[tuple[dict[str, Any], str]], run_bytes: list[bytes],
                   written: list[tuple[dict[str, Any], str]]) -> None:
        """Write a run of records to file ``n`` (which held ``start_size`` bytes) in one append; the
        file left before it is made durable first, a new file's name right after."""
        if not run:
            return
        path = trail.file_path(self.directory, n)
        if self._unsynced is not None and self._unsynced[0] != path:
            self._sync(*self._unsynced)  # the file being left: durable before the next one starts
        data = b"".join(run_bytes)
        ino = _append(path, data)
        if start_size == 0:
            trail.fsync_dir(self.directory)  # a new file: its name must survive a crash too
        seq = int(run[-1][0]["seq"])
        digest = record.digest(run[-1][1])
        self._known = (n, ino, start_size + len(data), seq, digest)
        self._unsynced = (path, trail.Anchor(seq, n, digest))
        written.extend(run)

    def flush(self) -> None:
        """fsync the newest record appended, then let the anchor name it."""
        with self._lock:
            unsynced, self._unsynced = self._unsynced, None
        if unsynced is not None:
            self._sync(*unsynced)

    def _sync(self, path: Path, anchor: trail.Anchor) -> None:
        with self._sync_lock:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            if self.anchor_damage is None:
                trail.write_anchor(self.directory, anchor)

    def _start_flusher(self) -> None:
        self._wake.set()
        if self._flusher is None:
            self._flusher = threading.Thread(target=self._flush_loop, name="audit-sync", daemon=True)
            self._flusher.start()

    def _flush_loop(self) -> None:
        while not self._closed.is_set():
            self._wake.wait()
            self._wake.clear()
            self._closed.wait(self.sync_interval_s)  # gather what else arrives meanwhile: one fsync for all
            try:
                self.flush()
            except OSError as e:
                _log.error("could not sync the audit trail in %s: %s", self.directory, e)

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
            self._check_anchor(0)
            return tail.n, 0, "", tail.size, tail.partial
        try:
            seq = int(record.parse(tail.last)["seq"])
        except ValueError as e:
            raise OSError(f"the trail's last record is unreadable ({e}); run 'ledger-deletion audit verify'") from e
        self._check_anchor(seq)
        if tail.partial:
            _log.warning("the newest audit file ends inside a record (a write was cut short): continuing from "
                         "seq %d in a new file; 'ledger-deletion audit verify' names the damaged record", seq)
        return tail.n, seq, record.digest(tail.last), tail.size, tail.partial

    def _check_anchor(self, last_seq: int) -> None:
        """The anchor against the trail's end as read from disk: damage found is kept, never repaired."""
        if self.anchor_damage is not None:
            return
        state = trail.anchor_file(self.directory)
        anchor = trail.read_anchor(self.directory)
        if state != trail.AnchorFile.WRITTEN and last_seq > 0:
            why = f"the anchor is {state.value} although the trail holds records (seq 1–{last_seq})"
        elif anchor is not None and anchor.seq < 0:
            why = "the anchor is unreadable"
        elif anchor is not None and anchor.seq > last_seq:
            why = f"the anchor names seq {anchor.seq}, past the trail's end at seq {last_seq} (records cut off)"
        else:
            return
        self.anchor_damage = why
        _log.error("audit trail in %s is damaged: %s; records are still appended, but the anchor is left as "
                   "found so that 'ledger-deletion audit verify' keeps naming the damage", self.directory, why)


@contextmanager
def flocked(directory: Path) -> Iterator[None]:
    """The trail's file lock, waited for at most :data:`LOCK_WAIT_S` (then OSError).  Unbounded, the wait
    would let another process holding it (a backup, a hung volume) hold the worker's thread, and with
    it a SIGTERM, for as long as it pleased."""
    path = directory / trail.ANCHOR
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise OSError(f"its lock ({path}) is held by another process") from None
                time.sleep(LOCK_POLL_S)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def _append(path: Path, data: bytes) -> int:
    """Append ``data`` whole or not at all: a short write (a full disk) is cut back to where the file
    ended, under the trail's lock, so the records it held are neither half-written (``audit verify``
    would call the file truncated for good) nor written twice when they are appended again."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        before = os.fstat(fd).st_size
        try:
            written = os.write(fd, data)
        except OSError:
            os.ftruncate(fd, before)  # nothing of it stays (a write that failed may still have landed some)
            raise
        if written != len(data):
            os.ftruncate(fd, before)
            raise OSError(f"short write to {path}: {written} of {len(data)} bytes (cut back)")
        return os.fstat(fd).st_ino
    finally:
        os.close(fd)


def daemon_writer(config: DeletionConfig, data_dir: Path, broker: BrokerClient) -> AuditWriter:
    """``<data-dir>/audit/``, rotated at ``ledgerDeletionAuditFileMaxBytes``; with
    ``ledgerDeletionAuditTopicEnabled``, every record also goes to ``<ledgerDeletionTopic>-AUDIT``."""
    copy = TopicCopy(broker, audit_topic(config.ledger_deletion_topic)) \
        if config.ledger_deletion_audit_topic_enabled else None
    return AuditWriter(trail.audit_dir(data_dir), config.ledger_deletion_audit_file_max_bytes, publish=copy)
