"""Locks on a data dir: one daemon per data dir, and one "find or start the broker" at a time.

Why two: ``run`` and ``demo`` own the embedded broker for their whole life, so
a second one on the same data dir must be refused (it used to stop the first
one's broker, and the first never noticed).  Every other command only needs
the broker for a moment, and must never start a second broker beside a live
one: "find or start" is a short critical section that all of them share.

``flock`` locks belong to an open file description, so the kernel drops them
when the holder dies, SIGKILL included: a lock is never stale.  The holder's
pid is written into the file only so the refusal can name it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from deletion_service.errors import UserError

DAEMON_LOCK = "daemon.lock"
BROKER_LOCK = "broker.lock"


class DataDirLock:
    """An exclusive ``flock`` on ``path``, taken without waiting (``acquire``) or waiting (``hold``)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None

    def holder(self) -> str:
        """The pid written by whoever holds it (``"unknown"`` if it cannot be read)."""
        try:
            return self.path.read_text().strip() or "unknown"
        except OSError:
            return "unknown"

    def acquire(self, what: str) -> None:
        """Take the lock now or refuse in one line naming the holder's pid."""
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._own(fd)
        except OSError as e:
            self._let_go(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise UserError(f"{what} already runs on data dir {self.path.parent} (pid {self.holder()}); "
                                "stop it first, or choose another --data-dir") from None
            raise
        except BaseException:  # Ctrl-C between taking it and owning it
            self._let_go(fd)
            raise

    def held_elsewhere(self) -> str | None:
        """The holder's pid when another process holds the lock (probed without waiting), else None."""
        if self._fd is not None:
            return None  # ours
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return self.holder()
            raise
        finally:
            os.close(fd)  # drops the lock if the probe took it
        return None

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Wait for the lock (another command's find-or-start takes seconds at most).

        A Ctrl-C at any moment leaves it free: taken but not yet ours, its descriptor was lost and
        the lock stayed held by this very process, so the broker's stop on the way out waited for
        it for ever (a demo interrupted as its broker started hung so)."""
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._own(fd)
            yield
        finally:
            self._let_go(fd)

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def _open(self) -> int:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except PermissionError as e:
            raise UserError(f"cannot create {self.path}: permission denied; choose another --data-dir") from e

    def _own(self, fd: int) -> None:
        self._fd = fd  # first: from here on release() drops it, whatever interrupts the rest
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)

    def _let_go(self, fd: int) -> None:
        """Drop whatever ``fd`` took: release it if it was recorded as ours, else close it (closing
        drops a flock taken but not yet recorded)."""
        if self._fd == fd:
            self.release()
        else:
            os.close(fd)

    def __del__(self) -> None:  # a forgotten lock is dropped with its object, as with a file
        self.release()
