"""The ``filesystem`` driver on real directories (upstream's MapFile layout)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deletion_service.delete_phase.rules.verify_offload import IndexCheck, IndexExpectation, Verification
from deletion_service.delete_phase.storage.offload_index import verify_offloaded_copy
from deletion_service.testing.offload_objects import build_mapfile_data, pulsar_ledger_metadata
from offloaders import (
    ObjectDeleteOutcome,
    OffloaderSettings,
    OffloadNotAllowedError,
    OffloadTarget,
    OffloadTargetError,
    OffloadTransientError,
    SegmentRef,
    offloader_for,
)
from offloaders.filesystem import FileSystemOffloader, map_os_error

ML = "public/default/persistent/orders"


@pytest.fixture
def base(tmp_path: Path) -> Path:
    (tmp_path / "offload").mkdir()
    return tmp_path / "offload"


@pytest.fixture
def fs(base: Path) -> FileSystemOffloader:
    offloader = offloader_for("filesystem", OffloaderSettings(filesystem_base_dir=base))
    assert isinstance(offloader, FileSystemOffloader)
    return offloader


def target(ledger_id: int = 42, msb: int = -9, lsb: int = 3, metadata: dict[str, str] | None = None,
           ml: str | None = ML) -> OffloadTarget:
    return OffloadTarget("filesystem", metadata or {}, msb, lsb, ledger_id, managed_ledger_name=ml)


def verify(fs: FileSystemOffloader, t: OffloadTarget, expect: IndexExpectation | None = None) -> IndexCheck:
    """Read the MapFile's metadata record and judge it, as the delete phase does."""
    return verify_offloaded_copy(fs, t, expect)


def offload(fs: FileSystemOffloader, t: OffloadTarget, ml: str = ML, entries: int = 2, size: int = 20,
            compressed: bool = False) -> Path:
    """Write a MapFile directory as upstream's FileSystemManagedLedgerOffloader does."""
    (name,) = fs.object_names(t)
    path = fs.object_path(t, name)
    path.mkdir(parents=True)
    meta = pulsar_ledger_metadata(ml, entries=entries, size=size)
    data = build_mapfile_data(meta, [b"a" * 10, b"b" * 10], record_compressed=compressed)
    (path / "data").write_bytes(data)
    (path / "index").write_bytes(b"SEQ\x06index")
    (path / ".data.crc").write_bytes(b"crc")
    return path


def test_upstream_layout_names(fs: FileSystemOffloader, base: Path) -> None:
    t = target()
    name = "42-ffffffff-ffff-fff7-0000-000000000003"
    assert fs.object_names(t) == [f"{ML}/{name}"]
    assert fs.object_path(t, fs.object_names(t)[0]) == (base / ML / name).resolve()
    # the ML name may come from driver metadata, as upstream adds it at read/delete time
    from_md = target(metadata={"ManagedLedgerName": "t/ns/persistent/x"}, ml=None)
    assert fs.object_names(from_md)[0].startswith("t/ns/persistent/x/")
    with pytest.raises(OffloadTargetError, match="managed ledger name"):
        fs.object_names(target(ml=None))


def test_delete_then_absent(fs: FileSystemOffloader, base: Path) -> None:
    t, other = target(), target(ledger_id=43)
    path = offload(fs, t)
    other_path = offload(fs, other)
    assert fs.exists(t, fs.object_names(t)[0])
    head = fs.head(t, fs.object_names(t)[0])
    assert head is not None and head.size > 0
    assert fs.delete_all(t) == {fs.object_names(t)[0]: ObjectDeleteOutcome.DELETED}
    assert not path.exists()
    assert other_path.exists()
    assert fs.delete_all(t) == {fs.object_names(t)[0]: ObjectDeleteOutcome.ABSENT}


def test_storage_base_path_inside_base_is_honoured(fs: FileSystemOffloader, base: Path) -> None:
    (base / "cluster-a").mkdir()
    t = target(metadata={"storageBasePath": str(base / "cluster-a")})
    path = offload(fs, t)
    assert path.is_relative_to(base / "cluster-a")
    assert verify(fs, t).outcome is Verification.VERIFIED
    t_uri = target(metadata={"storageBasePath": f"file://{base}/cluster-a"})
    assert fs.delete_all(t_uri) == {fs.object_names(t)[0]: ObjectDeleteOutcome.DELETED}


def test_refuses_unexpected_directory_content(fs: FileSystemOffloader) -> None:
    t = target()
    path = offload(fs, t)
    (path / "precious.txt").write_text("not a MapFile part")
    with pytest.raises(OffloadTargetError, match="precious.txt"):
        fs.delete_all(t)
    assert (path / "data").exists()


def test_symlink_escape_is_refused(fs: FileSystemOffloader, base: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (base / "public").symlink_to(outside, target_is_directory=True)
    with pytest.raises(OffloadNotAllowedError, match="outside"):
        fs.delete_all(target())


def test_names_not_from_object_names_are_contained(fs: FileSystemOffloader) -> None:
    for bad in ("../x", "/etc/passwd", "a/./b"):
        with pytest.raises(OffloadNotAllowedError):
            fs.delete_objects(target(), [bad])


def test_streaming_segments_are_refused(fs: FileSystemOffloader) -> None:
    t = OffloadTarget("filesystem", {}, 1, 2, 3, segments=(SegmentRef(1, 1),), managed_ledger_name=ML)
    with pytest.raises(OffloadTargetError, match="streaming"):
        fs.delete_all(t)


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "record-compressed"])
def test_index_verification(fs: FileSystemOffloader, compressed: bool) -> None:
    t = target()
    assert verify(fs, t).outcome is Verification.ABSENT
    offload(fs, t, entries=2, size=20, compressed=compressed)
    assert verify(fs, t, IndexExpectation(entries=2, size=20)).outcome is Verification.VERIFIED
    check = verify(fs, t, IndexExpectation(size=21))
    assert check.outcome is Verification.MISMATCH and "size" in check.detail


def test_index_of_another_managed_ledger_is_refused(fs: FileSystemOffloader) -> None:
    t = target()
    offload(fs, t, ml="public/default/persistent/payments")  # placed under orders/, written for payments
    check = verify(fs, t)
    assert check.outcome is Verification.MISMATCH and "payments" in check.detail


def test_garbage_data_file_is_refused_and_missing_one_unverifiable(fs: FileSystemOffloader) -> None:
    t = target()
    path = offload(fs, t)
    (path / "data").write_bytes(b"garbage")
    assert verify(fs, t).outcome is Verification.MISMATCH
    (path / "data").unlink()
    assert verify(fs, t).outcome is Verification.UNVERIFIABLE


def test_os_error_mapping() -> None:
    assert isinstance(map_os_error(OSError(5, "EIO"), "x"), OffloadTransientError)
    assert isinstance(map_os_error(PermissionError(13, "denied"), "x"), OffloadTargetError)


def test_permission_denied_is_a_target_error(fs: FileSystemOffloader,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # Simulated (tests may run as root, which ignores directory permissions).
    t = target()
    offload(fs, t)

    def denied(self: Path, missing_ok: bool = False) -> None:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "unlink", denied)
    with pytest.raises(OffloadTargetError, match="Permission denied"):
        fs.delete_all(t)


def test_io_error_is_transient(fs: FileSystemOffloader, monkeypatch: pytest.MonkeyPatch) -> None:
    t = target()
    offload(fs, t)

    def stale(self: Path, missing_ok: bool = False) -> None:
        raise OSError(116, "Stale file handle", str(self))  # ESTALE, as NFS reports it

    monkeypatch.setattr(Path, "unlink", stale)
    with pytest.raises(OffloadTransientError):
        fs.delete_all(t)
