"""The trail on disk: chained appends, rotation, continuing after a restart, two writers on one
directory, and ``audit verify`` (through the real CLI) naming the first bad record of a trail that
was edited, had a record removed, reordered, truncated or cut short."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deletion_service.audit import trail
from deletion_service.audit.verify import verify
from deletion_service.audit.writer import AuditWriter
from tests.support.audit_entries import entry, fill, lines
from tests.support.cli_runner import run_cli


def verify_cli(data_dir: Path) -> tuple[int, str]:
    r = run_cli("audit", "verify", "--data-dir", str(data_dir))
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, r.stdout + r.stderr


def test_chain_rotation_and_restart(tmp_path: Path) -> None:
    first = fill(tmp_path, 30, max_bytes=4096)
    files = trail.files(first.directory)
    assert len(files) > 2, "4 KiB files must rotate"
    assert all(p.stat().st_size <= 4096 for _, p in files)
    fill(tmp_path, 10, max_bytes=4096, start=31)  # a new writer (as after a restart): continues from disk
    records = [json.loads(line) for _, ls in lines(tmp_path) for line in ls]
    assert [r["seq"] for r in records] == list(range(1, 41))
    assert [r["request"]["ledgerId"] for r in records] == list(range(1, 41))
    verdict = verify(first.directory)
    assert verdict.whole and verdict.records == 40 and verdict.files == len(trail.files(first.directory))
    code, out = verify_cli(tmp_path)
    assert code == 0 and "40 record(s)" in out


def test_a_writer_continues_after_another_wrote(tmp_path: Path) -> None:
    """Its memory of the tail is checked against the file every time, never trusted alone."""
    a = fill(tmp_path, 3)
    fill(tmp_path, 2, start=4)
    a.write(entry(6))
    a.close()
    assert verify(a.directory).whole and verify(a.directory).last_seq == 6


WRITER = """
import sys
from pathlib import Path
from deletion_service.audit.writer import AuditWriter
from tests.support.audit_entries import entry
w = AuditWriter(Path(sys.argv[1]), 8192)
for i in range(int(sys.argv[2])):
    assert w.write(entry(i)) is not None
w.close()
"""


def test_two_processes_on_one_directory_never_fork_the_chain(tmp_path: Path) -> None:
    directory = trail.audit_dir(tmp_path)
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(directory), "150"]) for _ in range(3)]
    assert [p.wait(120) for p in procs] == [0, 0, 0]
    verdict = verify(directory)
    assert verdict.whole, verdict.broken
    assert verdict.records == 450


def _edit(tmp_path: Path, index: int) -> None:
    """Change the reason of the record at ``index`` of the first file, keeping it valid JSON."""
    path, ls = lines(tmp_path)[0]
    rec = json.loads(ls[index])
    rec["reason"] = "nothing to see here"
    ls[index] = json.dumps(rec, separators=(",", ":")) + "\n"
    path.write_text("".join(ls))


@pytest.mark.parametrize("case", ["edited", "edited last", "removed", "removed last", "reordered", "truncated",
                                  "garbage line", "removed first"])
def test_verify_names_the_first_bad_record(tmp_path: Path, case: str) -> None:
    fill(tmp_path, 12)
    code, out = verify_cli(tmp_path)
    assert code == 0, out
    path, ls = lines(tmp_path)[0]
    expected = {"edited": 5, "edited last": 12, "removed": 5, "removed last": 12, "reordered": 5,
                "truncated": 12, "garbage line": 5, "removed first": 1}[case]
    if case == "edited":
        _edit(tmp_path, 4)
    elif case == "edited last":
        _edit(tmp_path, 11)
    elif case in ("removed", "removed last", "removed first"):
        del ls[expected - 1]
        path.write_text("".join(ls))
    elif case == "reordered":
        ls[4], ls[5] = ls[5], ls[4]
        path.write_text("".join(ls))
    elif case == "truncated":
        path.write_text("".join(ls)[:-40])
    elif case == "garbage line":
        ls[4] = "hello\n"
        path.write_text("".join(ls))
    code, out = verify_cli(tmp_path)
    assert code == 1, out
    assert f"record seq {expected}:" in out, out
    assert len(out.strip().splitlines()) == 1, out
    r = run_cli("audit", "verify", "--json", "--data-dir", str(tmp_path))
    assert r.returncode == 1 and json.loads(r.stdout)["firstBadSeq"] == expected


def test_a_truncated_tail_is_not_continued_but_left_for_verify(tmp_path: Path) -> None:
    writer = fill(tmp_path, 5)
    path, ls = lines(tmp_path)[0]
    path.write_text("".join(ls)[:-30])  # a write cut short: record 5 is half there
    later = fill(tmp_path, 1, start=6)
    assert later.directory == writer.directory
    assert len(trail.files(writer.directory)) == 2  # the damaged file is left as it is
    verdict = verify(writer.directory)
    assert not verdict.whole and verdict.broken is not None and verdict.broken.seq == 5
    [new] = [json.loads(line) for line in lines(tmp_path)[1][1]]
    assert new["seq"] == 5  # continues from the last whole record


def test_query_by_ledger_topic_and_since(tmp_path: Path) -> None:
    writer = AuditWriter(trail.audit_dir(tmp_path), clock=lambda: 1_000_000.0)  # 1970-01-12
    writer.write(entry(1, "persistent://t/ns/a"))
    writer.clock = lambda: 2_000_000_000.0  # 2033
    writer.write(entry(2, "persistent://t/ns/b", outcome="still_in_use"))
    writer.write(entry(1, "persistent://t/ns/b"))
    writer.close()

    def query(*args: str) -> list[dict]:
        r = run_cli("audit", *args, "--json", "--data-dir", str(tmp_path))
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    assert [r["seq"] for r in query()] == [1, 2, 3]
    assert [r["seq"] for r in query("--ledger", "1")] == [1, 3]
    assert [r["seq"] for r in query("--topic", "t/ns/b")] == [2, 3]
    assert [r["seq"] for r in query("--since", "2000-01-01")] == [2, 3]
    assert [r["seq"] for r in query("--since", "2033-05-18T03:33:20Z")] == [2, 3]
    assert [r["seq"] for r in query("--since", "2033-05-18T03:33:20.001Z")] == []
    assert [r["seq"] for r in query("--since", "1d")] == [2, 3]  # 2033 is after a day ago
    assert query("--ledger", "1", "--topic", "persistent://t/ns/a", "--since", "1970-01-01T00:00Z")[0]["seq"] == 1
    table = run_cli("audit", "--ledger", "2", "--data-dir", str(tmp_path))
    assert table.returncode == 0 and "still_in_use" in table.stdout and "1 audit record" in table.stdout


def test_operator_mistakes(tmp_path: Path) -> None:
    run_cli("audit", "--data-dir", str(tmp_path)).assert_one_line_error(1, "no audit trail under")
    run_cli("audit", "verify", "--data-dir", str(tmp_path)).assert_one_line_error(1, "no audit trail under")
    fill(tmp_path, 1)
    run_cli("audit", "--since", "last tuesday", "--data-dir", str(tmp_path)).assert_one_line_error(2, "--since")
    run_cli("audit", "--topic", "a/b/c/d/e", "--data-dir", str(tmp_path)).assert_one_line_error(2, "--topic")


def test_group_commit_makes_records_durable_and_anchored_within_the_interval(tmp_path: Path) -> None:
    """Records are fsynced by the flusher, not one by one; the anchor names the last one once synced."""
    writer = AuditWriter(trail.audit_dir(tmp_path), sync_interval_s=0.05)
    for lid in range(1, 101):
        writer.write(entry(lid))
    deadline = time.monotonic() + 5
    while (anchor := trail.read_anchor(writer.directory)) is None or anchor.seq < 100:
        assert time.monotonic() < deadline, f"anchor still at {anchor}"
        time.sleep(0.02)
    assert verify(writer.directory).whole
    writer.close()


BATCH_WRITER = """
import sys
from pathlib import Path
from deletion_service.audit.writer import AuditWriter
from tests.support.audit_entries import entry
w = AuditWriter(Path(sys.argv[1]), 8192)
for i in range(int(sys.argv[2])):
    assert None not in w.write_all([entry(i * 10 + k) for k in range(10)])
w.close()
"""


def test_two_processes_appending_batches_never_fork_the_chain(tmp_path: Path) -> None:
    directory = trail.audit_dir(tmp_path)
    procs = [subprocess.Popen([sys.executable, "-c", BATCH_WRITER, str(directory), "30"]) for _ in range(3)]
    assert [p.wait(120) for p in procs] == [0, 0, 0]
    verdict = verify(directory)
    assert verdict.whole, verdict.broken
    assert verdict.records == 900
