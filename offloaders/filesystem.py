"""The ``filesystem`` driver: ledgers offloaded to a (local or mounted) directory.

Upstream's ``FileSystemManagedLedgerOffloader`` writes each ledger as a Hadoop
MapFile *directory* ``<storageBasePath>/<managedLedgerName>/<ledgerId>-<uuid>``
holding ``data`` and ``index`` (plus ``.data.crc``/``.index.crc`` on Hadoop's local
file system).  Its driver metadata records only ``storageBasePath``; the managed
ledger name is added at read/delete time (key ``ManagedLedgerName``), so here it
comes from that key or from :attr:`OffloadTarget.managed_ledger_name`.
Upstream has no streaming offload for this driver.

Safety: every path is resolved (symlinks followed) and must stay inside the
configured base directory; ``storageBasePath`` from the message is honoured only
when it lies inside it.  A directory is removed only if it holds nothing but
MapFile parts, so a wrong name can never ``rm -rf`` something else.
"""

from __future__ import annotations

import errno
import os
import re
import struct
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import ClassVar

from metastore.formats.custom_metadata import MANAGED_LEDGER_NAME_FIELD
from offloaders.allow_list import FILESYSTEM_DRIVERS, AllowList, decide
from offloaders.index_format import IndexFormatError, parse_ledger_metadata_format, read_mapfile_metadata_record
from offloaders.interface import (
    UUID_PATTERN,
    IndexFacts,
    IndexKind,
    IndexRef,
    IndexState,
    Located,
    ObjectDeleteOutcome,
    ObjectHead,
    ObjectKind,
    ObjectName,
    Offloader,
    OffloadError,
    OffloadNotAllowedError,
    OffloadTarget,
    OffloadTargetError,
    OffloadTransientError,
    StorageLocation,
    unique,
)

STORAGE_BASE_PATH_KEY = "storageBasePath"
#: What a MapFile directory may contain; anything else and we refuse to remove it.
MAPFILE_PARTS = frozenset({"data", "index", ".data.crc", ".index.crc"})
#: Enough for the SequenceFile header and the first (metadata) record.
MAX_METADATA_READ = 4 * 1024 * 1024

_TRANSIENT_ERRNOS = frozenset(
    getattr(errno, n) for n in ("EIO", "ETIMEDOUT", "ESTALE", "EAGAIN", "EBUSY", "EINTR", "ENETDOWN",
                                "ENETUNREACH", "EHOSTDOWN", "EHOSTUNREACH", "ECONNREFUSED", "ECONNRESET",
                                "ENOLCK")
    if hasattr(errno, n))


def map_os_error(err: OSError, what: str) -> OffloadError:
    """A failed file operation -> retry (I/O hiccup, NFS) or DLQ (permissions, layout)."""
    if err.errno in _TRANSIENT_ERRNOS:
        return OffloadTransientError(f"{what}: {err}")
    return OffloadTargetError(f"{what}: {err}")


def mapfile_dir_name(ledger_id: int, uuid_text: str) -> str:
    """Upstream ``getDataFilePath``: ``<ledgerId>-<uuid>``."""
    return f"{ledger_id}-{uuid_text}"


#: Directory levels of a managed-ledger name (``tenant/ns/persistent/<encoded topic>``) under the root.
ML_NAME_LEVELS = 4
#: An object name as :meth:`FileSystemOffloader.object_names` makes it: ``<ml name>/<ledgerId>-<uuid>``.
_OBJECT_NAME = re.compile(rf"[^/]+/[^/]+/persistent/[^/]+/(0|[1-9][0-9]{{0,18}})-({UUID_PATTERN})")
_INT64_MAX = (1 << 63) - 1


def _files_size(directory: str) -> int:
    """Bytes of the plain files directly in ``directory`` (a MapFile's parts), as :meth:`head` counts."""
    with os.scandir(directory) as it:
        return sum(c.stat(follow_symlinks=False).st_size for c in it if c.is_file(follow_symlinks=False))


def _safe_relative(text: str, what: str) -> PurePosixPath:
    """A relative path without '..', empty or absolute parts (managed-ledger names
    are ``tenant/ns/persistent/<url-encoded topic>``, which never need them)."""
    if not text or "\x00" in text:
        raise OffloadNotAllowedError(f"{what} {text!r} is empty or contains NUL")
    p = PurePosixPath(text)
    if p.is_absolute() or any(part in ("..", ".", "") for part in text.split("/")):
        raise OffloadNotAllowedError(f"{what} {text!r} would escape the offload base directory")
    return p


class FileSystemOffloader(Offloader):
    driver_names: ClassVar[frozenset[str]] = FILESYSTEM_DRIVERS

    def __init__(self, base_dir: str | os.PathLike[str], allow: AllowList | None = None) -> None:
        self.base_dir = Path(base_dir)
        self.allow = allow or AllowList()

    # ------------------------------------------------------------------ paths

    def check_allowed(self, target: OffloadTarget) -> None:
        if target.driver_name.strip().lower() not in self.driver_names:
            raise OffloadNotAllowedError(
                f"driver {target.driver_name!r} is not served by the filesystem offloader")
        decision = decide(self.allow, target.driver_name)
        if not decision:
            raise OffloadNotAllowedError(decision.reason)
        if target.segments:
            raise OffloadTargetError("the filesystem driver has no streaming-offload segments (upstream "
                                     "never writes them); refusing a target that names some")
        self._root(target)

    def _base(self) -> Path:
        return self.base_dir.resolve()

    def _root(self, target: Located) -> Path:
        base = self._base()
        raw = (target.driver_metadata.get(STORAGE_BASE_PATH_KEY) or "").strip()
        if not raw or raw == "null":  # upstream writes "null" when hadoop.tmp.dir is unset
            return base
        if raw.startswith("file://"):
            raw = raw[len("file://"):]
        elif "://" in raw:
            raise OffloadTargetError(f"storageBasePath {raw!r} is not a local path (only file systems "
                                     "mounted locally are supported)")
        path = Path(raw)
        root = (path if path.is_absolute() else base / path).resolve()
        if not root.is_relative_to(base):
            raise OffloadNotAllowedError(
                f"storageBasePath {raw!r} is outside the offload base directory {base}")
        return root

    def _ml_name(self, target: OffloadTarget) -> str:
        name = target.driver_metadata.get(MANAGED_LEDGER_NAME_FIELD) or target.managed_ledger_name
        if not name:
            raise OffloadTargetError("filesystem offload needs the managed ledger name (driver metadata "
                                     f"{MANAGED_LEDGER_NAME_FIELD!r} or the message's topic)")
        return name

    def object_names(self, target: OffloadTarget) -> list[str]:
        """One name per ledger: ``<managedLedgerName>/<ledgerId>-<uuid>``, relative to the root."""
        self.check_allowed(target)
        ml = _safe_relative(self._ml_name(target), "managed ledger name")
        return [str(ml / mapfile_dir_name(target.ledger_id, target.uuid))]

    def object_path(self, target: OffloadTarget, name: str) -> Path:
        """Absolute path of ``name`` under the target's root; refuses any escape
        (including through a symlink)."""
        root = self._root(target)
        rel = _safe_relative(name, "object name")
        resolved = (root / rel).resolve()
        if not resolved.is_relative_to(root) or resolved == root:
            raise OffloadNotAllowedError(f"object {name!r} resolves outside {root}")
        return resolved

    # ------------------------------------------------------------------ objects

    def head(self, target: OffloadTarget, name: str) -> ObjectHead | None:
        self.check_allowed(target)
        path = self.object_path(target, name)
        try:
            if path.is_dir():
                size = sum(p.stat().st_size for p in path.iterdir() if p.is_file())
            else:
                size = path.stat().st_size
            modified_ms = int(path.stat().st_mtime * 1000)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise map_os_error(e, f"stat {path}") from e
        return ObjectHead(name, size, {}, modified_ms)

    def delete_objects(self, target: OffloadTarget, names: Sequence[str]) -> dict[str, ObjectDeleteOutcome]:
        self.check_allowed(target)
        return {name: self._delete_one(self.object_path(target, name)) for name in unique(names)}

    def _delete_one(self, path: Path) -> ObjectDeleteOutcome:
        try:
            if not path.is_dir():
                path.unlink()
                return ObjectDeleteOutcome.DELETED
            children = list(path.iterdir())
            unexpected = sorted(c.name for c in children if c.name not in MAPFILE_PARTS or not c.is_file())
            if unexpected:
                raise OffloadTargetError(
                    f"{path} holds {unexpected}, not only MapFile parts; not removing it")
            # data first: an interrupted deletion leaves the index part, never a
            # directory that still looks complete.
            for part in sorted(children, key=lambda c: c.name != "data"):
                part.unlink(missing_ok=True)
            path.rmdir()
            return ObjectDeleteOutcome.DELETED
        except FileNotFoundError:
            return ObjectDeleteOutcome.ABSENT
        except OSError as e:
            raise map_os_error(e, f"delete {path}") from e

    # ------------------------------------------------------------------ listing

    def list_objects(self, where: StorageLocation, prefix: str = "",
                     start_after: str | None = None) -> Iterator[ObjectHead]:
        """Every entry ``<ml name>/<entry>`` five levels below the root (where upstream's layout
        puts a ledger's MapFile directory), named relative to the root, in name order.

        Symlinks are not followed, so a listing never leaves the base directory; a
        missing root is a :class:`OffloadTargetError` (a wrong path is not "empty")."""
        if where.driver_name.strip().lower() not in self.driver_names:
            raise OffloadNotAllowedError(f"driver {where.driver_name!r} is not served by the filesystem offloader")
        decision = decide(self.allow, where.driver_name)
        if not decision:
            raise OffloadNotAllowedError(decision.reason)
        root = self._root(where)
        if not root.is_dir():
            raise OffloadTargetError(f"filesystem offload root {root} is not a directory")
        try:
            heads = sorted(self._entries(root, root, ML_NAME_LEVELS), key=lambda h: h.name)
        except OSError as e:
            raise map_os_error(e, f"list {root}") from e
        return iter([h for h in heads if h.name.startswith(prefix) and (not start_after or h.name > start_after)])

    def _entries(self, root: Path, directory: Path, levels: int) -> Iterator[ObjectHead]:
        with os.scandir(directory) as it:
            entries = list(it)
        for entry in entries:
            if levels > 0:
                if entry.is_dir(follow_symlinks=False):
                    yield from self._entries(root, Path(entry.path), levels - 1)
                continue
            stat = entry.stat(follow_symlinks=False)
            size = _files_size(entry.path) if entry.is_dir(follow_symlinks=False) else stat.st_size
            yield ObjectHead(Path(entry.path).relative_to(root).as_posix(), size, {}, int(stat.st_mtime * 1000))

    def describe_object(self, name: str) -> ObjectName:
        """``<ml name>/<ledgerId>-<uuid>``: one MapFile directory holds a ledger's data and index."""
        match = _OBJECT_NAME.fullmatch(name)
        if match is None or int(match.group(1)) > _INT64_MAX:
            return ObjectName(ObjectKind.OTHER)
        return ObjectName(ObjectKind.DATA, match.group(2), int(match.group(1)))

    # ------------------------------------------------------------------ index facts

    def index_refs(self, target: OffloadTarget) -> list[IndexRef]:
        """The MapFile directory itself: its ``data`` part's first record is the index."""
        (name,) = self.object_names(target)
        return [IndexRef(IndexKind.LEDGER, name, name)]

    def read_index(self, target: OffloadTarget, ref: IndexRef) -> IndexFacts:
        """The MapFile's first record (key -1) is the source ledger's BookKeeper
        metadata, the same bytes an S3 per-ledger index embeds."""
        self.check_allowed(target)
        name = ref.index_name
        path = self.object_path(target, name)
        data = path / "data"
        location = self._ml_name(target)
        try:
            if not path.exists():
                return IndexFacts(ref, IndexState.ABSENT, f"{name} absent", location_ml_name=location)
            if not path.is_dir():
                return IndexFacts(ref, IndexState.UNDECODED, f"{name} is a plain file, not a MapFile",
                                  location_ml_name=location)
            with data.open("rb") as f:
                head = f.read(MAX_METADATA_READ)
        except FileNotFoundError:
            return IndexFacts(ref, IndexState.INDEX_MISSING, f"{name}/data absent", location_ml_name=location)
        except OSError as e:
            raise map_os_error(e, f"read {data}") from e
        try:
            record = read_mapfile_metadata_record(head)
            if record is None:
                return IndexFacts(ref, IndexState.UNDECODED,
                                  f"{name}/data uses a SequenceFile compression we do not decode",
                                  location_ml_name=location)
            source = parse_ledger_metadata_format(record)
        except (IndexFormatError, struct.error, zlib.error, IndexError) as e:
            return IndexFacts(ref, IndexState.MALFORMED, f"{name}/data is not an offloaded ledger: {e}",
                              location_ml_name=location)
        return IndexFacts(ref, IndexState.READ, source=source, location_ml_name=location)
