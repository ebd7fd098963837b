"""A stopped broker lets go of its database before a new one starts on it (found by the 1,000-kill soak:
a replacement broker exited with RocksDB's "While lock file: …/LOCK: Resource temporarily unavailable")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from deletion_service.embedded import db_lock
from deletion_service.embedded.broker import EmbeddedBroker, alive, free_port, spawn, stop_pid, wait_ready
from deletion_service.errors import UserError

#: Holds the same kind of lock RocksDB takes (a POSIX fcntl write lock) on a file for a while: a stand-in
#: for a dying broker's last threads, whose timing the real broker offers only by chance.
HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
"""


def _hold(path: Path, seconds: float) -> subprocess.Popen:
    path.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_a_stopped_broker_is_alive_until_its_last_thread_let_go_of_the_database(tmp_path: Path) -> None:
    """Its main thread turns zombie while the other threads still exit holding the lock: ``alive``
    must not call it gone before they have (before the fix, the lock was still held in most tries)."""
    broker_dir = tmp_path / "broker"
    lock = db_lock.lock_file(broker_dir / "db")
    held_after_death = []
    for trial in range(12):
        port, metrics_port = free_port(), free_port()
        proc = spawn(broker_dir, port, metrics_port)
        wait_ready(proc, port, metrics_port, broker_dir / "broker.log")
        if trial % 3 == 0:  # in the soak its parent had died: someone else reaps it, at any moment
            threading.Thread(target=proc.wait, daemon=True).start()
        os.kill(proc.pid, signal.SIGKILL if trial % 2 else signal.SIGTERM)
        while alive(proc.pid):
            pass
        held_after_death.append(db_lock.is_locked(lock))
        proc.wait()
    assert not any(held_after_death), f"alive() said gone while the lock was held: {held_after_death}"


def test_a_start_waits_for_the_database_lock_instead_of_failing(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "data")
    holder = _hold(db_lock.lock_file(broker.db_path), 1.5)
    try:
        info = broker.start()  # before: the broker exited with 1 at start (RocksDB's LOCK error)
        assert holder.poll() is not None, "the broker started only after the lock was let go"
        assert alive(info.pid)
    finally:
        holder.kill()
        holder.wait()
        if broker.info is not None:
            stop_pid(broker.info.pid)


def test_a_lock_that_is_never_let_go_is_one_error_naming_its_holder(tmp_path: Path) -> None:
    db = tmp_path / "data" / "broker" / "db"
    holder = _hold(db_lock.lock_file(db), 60)
    try:
        with pytest.raises(UserError) as e:
            db_lock.wait_free(db, timeout_s=0.3)
        assert f"process {holder.pid}" in str(e.value) and "--data-dir" in str(e.value)
    finally:
        holder.kill()
        holder.wait()
    db_lock.wait_free(db, timeout_s=0.3)  # free again: returns at once


def test_a_database_never_started_is_not_locked(tmp_path: Path) -> None:
    assert not db_lock.is_locked(db_lock.lock_file(tmp_path / "db"))
