"""The embedded broker's database lock: wait for it to be free before starting a broker on it.

Found by the 1,000-kill soak: once in ~1,000 faults a freshly started broker
exited at once with ``IO error: While lock file: …/db.rocksdb/LOCK: Resource
temporarily unavailable``.  The broker it replaced had been stopped and looked
gone — its main thread was a zombie — but its other threads were still
exiting and still held RocksDB's lock (in 15 of 20 tries here a stopped
pulsar-lite's main thread was a zombie while the lock was held).  So before a
broker starts, the lock itself is asked: RocksDB takes a POSIX ``fcntl`` write
lock on ``<db>.rocksdb/LOCK``, and a non-blocking ``lockf`` probe of the same
kind says whether anyone still holds it.

Probing is harmless: nothing in this process holds that lock (the broker is
another process), so taking and dropping it changes nothing for anyone, and
every start happens under ``broker.lock``, so no other broker starts between
the probe and the spawn.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path

from deletion_service.errors import UserError


def lock_file(db_path: Path) -> Path:
    """Where pulsar-lite's RocksDB keeps its lock for ``--db-path db_path``."""
    return db_path.with_name(db_path.name + ".rocksdb") / "LOCK"


def is_locked(path: Path) -> bool:
    """Someone holds the POSIX write lock on ``path`` (False when the file does not exist yet, or
    cannot be opened: then the broker itself says what is wrong with its database)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EACCES, errno.EAGAIN):
            return True
        raise
    finally:
        os.close(fd)  # drops the probe's lock, if it got it
    return False


def holder(path: Path) -> int | None:
    """The pid holding a POSIX lock on ``path``, from ``/proc/locks`` (None when unknown)."""
    try:
        st = path.stat()
        table = Path("/proc/locks").read_text()
    except OSError:
        return None
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table.splitlines():
        fields = line.split()
        # "1: POSIX  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (a "->" marks a waiter, which holds nothing)
        if len(fields) >= 6 and fields[1] == "POSIX" and fields[5] == wanted:
            return int(fields[4])
    return None


def wait_free(db_path: Path, timeout_s: float = 10.0, poll_s: float = 0.02) -> None:
    """Return once nobody holds the database's lock; a holder that outlasts ``timeout_s`` is named."""
    path = lock_file(db_path)
    deadline = time.monotonic() + timeout_s
    while is_locked(path):
        if time.monotonic() >= deadline:
            pid = holder(path)
            who = f"process {pid}" if pid is not None else "another process"
            raise UserError(
                f"the embedded broker's database {path.parent} is still locked by {who} after "
                f"{timeout_s:g}s; a broker of this data dir under another path (a symlink?) or another "
                "program has it open: stop it, or choose another --data-dir"
            )
        time.sleep(poll_s)
