"""Where a data dir's daemon listens: ``<data-dir>/daemon.json`` beside its ``daemon.lock``.

``daemon.lock`` holds only the daemon's pid (its contract: a ``flock`` and the holder's pid, see
:mod:`.lock`), so a command reading the daemon's admin API (``status``) could only guess
``127.0.0.1:8090`` and said "no daemon answers" while the data dir's daemon listened on another
port.  So ``run`` writes, once its admin API listens, ``{"pid", "adminAddress", "adminUrl"}`` here,
and removes it when it stops.  A record whose pid no longer runs (the daemon was SIGKILLed) is
stale: :func:`find` says so and it is never used, since another process may listen on that port
by now.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from deletion_service.embedded.broker import alive

RECORD = "daemon.json"


@dataclass(frozen=True)
class DaemonRecord:
    pid: int
    admin_address: str  # HOST:PORT, as --admin-address takes it
    admin_url: str

    def to_json(self) -> dict[str, object]:
        return {"pid": self.pid, "adminAddress": self.admin_address, "adminUrl": self.admin_url}


@dataclass(frozen=True)
class Found:
    """What the data dir says of its daemon: a live record, or why there is none (``note``)."""

    record: DaemonRecord | None
    note: str


def path_of(data_dir: Path) -> Path:
    return Path(data_dir) / RECORD


def write(data_dir: Path, host: str, port: int, url: str) -> DaemonRecord:
    """Record this process as the data dir's daemon, listening on ``host:port`` (written whole:
    a reader never sees half a record)."""
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    record = DaemonRecord(os.getpid(), address, url)
    path = path_of(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{RECORD}.{os.getpid()}")
    tmp.write_text(json.dumps(record.to_json()) + "\n")
    tmp.replace(path)
    return record


def remove(data_dir: Path) -> None:
    """Remove the record if it is this process's (a later daemon's record is left alone)."""
    path = path_of(data_dir)
    record = _read(path)
    if record is not None and record.pid == os.getpid():
        with contextlib.suppress(OSError):
            path.unlink()


def find(data_dir: Path) -> Found:
    """The data dir's live daemon record, or None with a sentence saying why."""
    path = path_of(data_dir)
    if not path.exists():
        return Found(None, f"no daemon has recorded its admin address in {Path(data_dir).absolute()}")
    record = _read(path)
    if record is None:
        return Found(None, f"{path.absolute()} is unreadable; ignored")
    if not alive(record.pid):
        return Found(None, f"{path.absolute()} names pid {record.pid} on {record.admin_address}, which no longer "
                           "runs (a daemon that was killed); ignored")
    return Found(record, f"the daemon of {Path(data_dir).absolute()} (pid {record.pid})")


def _read(path: Path) -> DaemonRecord | None:
    try:
        raw = json.loads(path.read_text())
        return DaemonRecord(int(raw["pid"]), str(raw["adminAddress"]), str(raw["adminUrl"]))
    except (OSError, ValueError, TypeError, KeyError):
        return None
