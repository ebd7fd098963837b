"""Batched appends (``AuditWriter.write_all``, one per settled batch of the worker) write the very
trail one-at-a-time appends write: the same lines, byte for byte, across rotations and restarts.
(Two processes appending batches to one directory: tests/system/audit/test_trail_on_disk.py.)"""

from __future__ import annotations

import os
from pathlib import Path

from deletion_service.audit import trail
from deletion_service.audit.verify import verify
from deletion_service.audit.writer import AuditWriter
from tests.support.audit_entries import entry


def _trail_bytes(directory: Path) -> list[bytes]:
    return [p.read_bytes() for _, p in trail.files(directory)]


def test_a_batch_writes_what_one_at_a_time_writes_across_rotations_and_a_restart(tmp_path: Path) -> None:
    one, batched = tmp_path / "one", tmp_path / "batched"
    w = AuditWriter(one, 4096, daemon="d", clock=lambda: 1.0)
    for lid in range(1, 61):
        assert w.write(entry(lid)) is not None
    w.close()
    w = AuditWriter(batched, 4096, daemon="d", clock=lambda: 1.0)
    written = w.write_all([entry(lid) for lid in range(1, 41)])
    w.close()
    w = AuditWriter(batched, 4096, daemon="d", clock=lambda: 1.0)  # a restart: continues from disk
    written += w.write_all([entry(lid) for lid in range(41, 61)])
    w.close()
    assert [r["seq"] for r in written if r is not None] == list(range(1, 61))
    assert len(trail.files(batched)) > 2, "4 KiB files must rotate inside a batch"
    assert _trail_bytes(batched) == _trail_bytes(one)
    verdict = verify(batched)
    assert verdict.whole and verdict.records == 60
    assert trail.read_anchor(batched) == trail.read_anchor(one)


def test_an_empty_batch_writes_nothing(tmp_path: Path) -> None:
    w = AuditWriter(tmp_path / "audit")
    assert w.write_all([]) == []
    w.close()
    assert trail.files(tmp_path / "audit") == []


def test_a_batch_that_cannot_be_written_is_logged_whole_and_returns_none(tmp_path: Path, caplog) -> None:  # noqa: ANN001
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("x")
    w = AuditWriter(blocked / "audit")
    assert w.write_all([entry(1), entry(2)]) == [None, None]
    w.close()
    lost = [r for r in caplog.records if "audit record NOT written" in r.getMessage()]
    assert len(lost) == 2 and '"ledgerId":2' in lost[1].getMessage()




def test_a_short_write_leaves_the_file_as_it_was_and_the_records_are_written_once_later(
        tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """A full disk writes part of an append and refuses the rest.  The part must not stay: it would be
    written again with the whole batch once there is room (recorded twice) and leave a half record that
    ``audit verify`` calls truncated for good.  ``os.write`` is replaced for one call only, to produce
    the short write a real full disk produces (a test cannot fill this machine's disk)."""
    w = AuditWriter(tmp_path / "audit", daemon="d", clock=lambda: 1.0)
    assert w.write_all([entry(1)]) != [None]
    [(_, path)] = trail.files(tmp_path / "audit")
    before = path.read_bytes()
    real_write = os.write
    calls = []

    def short_write(fd: int, data: bytes) -> int:
        if not calls:
            calls.append(len(data))
            return real_write(fd, data[: len(data) // 2 + 3])  # whole lines and part of one
        return real_write(fd, data)

    monkeypatch.setattr("deletion_service.audit.writer.os.write", short_write)
    assert w.write_all([entry(2), entry(3), entry(4)]) == [None, None, None]
    assert path.read_bytes() == before, "the short write was cut back"
    assert w.refusing is not None
    written = w.write_all([entry(2), entry(3), entry(4)])  # room again: the batch once more
    w.close()
    assert [r["seq"] for r in written if r is not None] == [2, 3, 4]
    assert w.refusing is None
    verdict = verify(tmp_path / "audit")
    assert verdict.whole and verdict.records == 4
