"""Where the trail lives on disk: ``<data-dir>/audit/audit-<n>.jsonl`` in order of ``n``, and the anchor.

Files are numbered from 1 and read in numeric order (``audit-10`` after ``audit-9``);
a record never spans two files.  The anchor (``anchor``) is the writer's note
of the last record it made durable — seq, file and hash — so that cutting whole
records off the end of the newest file, or editing the last one (which leaves no
broken link behind), is still seen by ``verify``.  The same file is the writers'
``flock``; the anchor is one fixed-width ``pwrite`` at its start, so it is never
seen half written and never moves the file the lock is taken on.

The writer puts a first anchor (seq 0: "no record durable yet") in place, durably,
before it appends the trail's first record; so for a trail that holds records, an
anchor that is missing or empty was removed or emptied — never the writer's doing.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

AUDIT_DIR = "audit"
ANCHOR = "anchor"
ANCHOR_WIDTH = 256
_NAME = re.compile(r"audit-([1-9][0-9]*)\.jsonl")


def audit_dir(data_dir: Path) -> Path:
    return data_dir / AUDIT_DIR


def file_path(directory: Path, n: int) -> Path:
    return directory / f"audit-{n}.jsonl"


def files(directory: Path) -> list[tuple[int, Path]]:
    """Every trail file, oldest first."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    found = [(int(m.group(1)), directory / name) for name in names if (m := _NAME.fullmatch(name))]
    return sorted(found)


def lines(path: Path) -> Iterator[tuple[int, bytes, bool]]:
    """``(line number, bytes without the newline, complete)`` of one file; only the last line can be
    incomplete (a write cut short, or a file truncated by hand)."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            complete = raw.endswith(b"\n")
            yield number, raw.removesuffix(b"\n"), complete


@dataclass(frozen=True)
class Tail:
    """The end of the newest file: what the next record continues from."""

    n: int  # the newest file's number (0: no file yet)
    size: int  # its size in bytes
    ino: int
    last: bytes | None  # the trail's last complete line (of an older file if this one has none)
    partial: bool  # it ends inside a line


def read_tail(directory: Path) -> Tail:
    """The last complete line of the newest non-empty file, reading backwards only as far as needed."""
    trail = files(directory)
    if not trail:
        return Tail(0, 0, 0, None, False)
    n, path = trail[-1]
    stat = path.stat()
    ends_inside = False
    for _, older in reversed(trail):
        last, partial = _last_line(older)
        ends_inside = ends_inside or (partial and older == path)
        if last is not None:
            return Tail(n, stat.st_size, stat.st_ino, last, ends_inside)
    return Tail(n, stat.st_size, stat.st_ino, None, ends_inside)


def _last_line(path: Path, chunk: int = 65_536) -> tuple[bytes | None, bool]:
    """``(last complete line, the file ends inside a line)``."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return None, False
        want = chunk
        while True:
            start = max(0, size - want)
            f.seek(start)
            data = f.read(size - start)
            partial = not data.endswith(b"\n")
            body = data if partial else data[:-1]
            cut = body.rfind(b"\n")
            if partial:  # the incomplete line is not ours to continue from: the complete one before it
                body = body[:cut] if cut >= 0 else b""
                cut = body.rfind(b"\n")
            if cut >= 0 or start == 0:
                return (body[cut + 1:] if body or cut >= 0 else None), partial
            want *= 2


@dataclass(frozen=True)
class Anchor:
    seq: int
    file: int
    hash: str


#: What the writer puts in place before the trail's first record: nothing made durable yet.
GENESIS = Anchor(0, 0, "")


class AnchorFile(StrEnum):
    """The anchor file as found, before its content is read."""

    MISSING = "missing"
    EMPTY = "empty"  # created by a lock taken, nothing written in it (yet)
    WRITTEN = "written"


def anchor_file(directory: Path) -> AnchorFile:
    try:
        text = (directory / ANCHOR).read_bytes().strip()
    except FileNotFoundError:
        return AnchorFile.MISSING
    return AnchorFile.WRITTEN if text else AnchorFile.EMPTY


def read_anchor(directory: Path) -> Anchor | None:
    """The anchor, or None when it is missing or empty (:func:`anchor_file` tells which)."""
    try:
        text = (directory / ANCHOR).read_bytes().strip()
    except FileNotFoundError:
        return None
    if not text:
        return None  # the lock taken, no record made durable yet
    try:
        data = json.loads(text)
        return Anchor(int(data["seq"]), int(data["file"]), str(data["hash"]))
    except (ValueError, KeyError, TypeError):
        return Anchor(-1, -1, "")  # unreadable: verify says so


def write_anchor(directory: Path, anchor: Anchor, durable: bool = False) -> None:
    """One fixed-width write at offset 0: the whole anchor or the previous one, never a mix.
    ``durable``: fsynced (file and directory) before returning, as the first anchor must be."""
    text = json.dumps({"seq": anchor.seq, "file": anchor.file, "hash": anchor.hash}).encode()
    fd = os.open(directory / ANCHOR, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, text.ljust(ANCHOR_WIDTH), 0)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    if durable:
        fsync_dir(directory)


def fsync_dir(directory: Path) -> None:
    """Make the directory's entries (a new file's name) survive a crash."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
