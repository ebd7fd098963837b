"""``audit verify`` finds a truncated trail even once the anchor is removed or emptied, and checks the
trail against its ``-AUDIT`` topic copy.

The writer puts the anchor in place before the trail's first record, so a trail with records and no
anchor (or an empty one) has lost the one witness of its end: a break.  A writer that finds such
damage keeps appending but never rewrites the anchor (that would make the truncation pass).  And with
``ledgerDeletionAuditTopicEnabled`` the copy on the real embedded broker (pulsar-lite, written by a real
``run``) shows what the files lost even when whoever cut them also fixed up the anchor and the chain;
``audit verify`` says which it checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deletion_service.audit import record, trail
from deletion_service.audit.topic_check import compare
from deletion_service.audit.verify import verify
from deletion_service.audit.writer import AuditWriter
from tests.support.audit_entries import entry, fill, lines
from tests.support.cli_runner import run_cli
from tests.support.daemon_ledgers import TOPIC, request_file, seed
from tests.support.daemon_process import data_dir
from tests.support.harness import free_port

__all__ = ["data_dir"]  # the fixture: it stops a broker left behind

AUDIT_TOPIC = "persistent://pulsar/system/__ledger_deletion-AUDIT"
TOPIC_ON = ("--set", "ledgerDeletionAuditTopicEnabled=true")


def _verify(data: Path, *args: str) -> tuple[int, str]:
    r = run_cli("audit", "verify", "--data-dir", str(data), *args, timeout=120)
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, r.stdout + r.stderr


def _cut(data: Path, keep: int) -> None:
    """Keep the first ``keep`` lines of the (single) trail file: whole records cut off the end."""
    [(path, ls)] = lines(data)
    path.write_text("".join(ls[:keep]))


@pytest.mark.parametrize("anchor", ["removed", "emptied"])
def test_records_cut_off_with_the_anchor_removed_or_emptied_are_a_break(tmp_path: Path, anchor: str) -> None:
    fill(tmp_path, 12)
    directory = trail.audit_dir(tmp_path)
    _cut(tmp_path, 9)
    if anchor == "removed":
        (directory / trail.ANCHOR).unlink()
    else:
        (directory / trail.ANCHOR).write_bytes(b"")
    code, out = _verify(tmp_path)
    assert code == 1, f"a truncated trail without its anchor passed: {out}"
    assert "record seq 10:" in out and f"is {'missing' if anchor == 'removed' else 'empty'}" in out, out
    assert "checked: files only" in out, out


def test_a_writer_never_repairs_a_removed_anchor(tmp_path: Path) -> None:
    """A daemon restarted on the damaged trail appends on, and the break stays visible."""
    fill(tmp_path, 12)
    _cut(tmp_path, 9)
    (trail.audit_dir(tmp_path) / trail.ANCHOR).unlink()
    later = fill(tmp_path, 3, start=100)
    verdict = verify(later.directory)
    assert verdict.records == 12 and verdict.broken is not None, "the writer healed the anchor over the cut"
    assert later.anchor_damage is not None and "although the trail holds records" in later.anchor_damage


def test_records_cut_off_with_the_anchor_ahead_stay_broken_after_a_restart(tmp_path: Path) -> None:
    fill(tmp_path, 12)
    _cut(tmp_path, 9)
    later = fill(tmp_path, 5, start=100)  # the anchor named seq 12; the trail now ends at seq 14
    verdict = verify(later.directory)
    assert verdict.broken is not None, "the anchor was rewritten over the cut"
    assert later.anchor_damage is not None and "past the trail's end" in later.anchor_damage


def test_a_new_trail_is_anchored_before_its_first_record(tmp_path: Path) -> None:
    """Why an empty anchor is a break: the writer puts the first one (seq 0) in place, durably, first."""
    writer = AuditWriter(trail.audit_dir(tmp_path), sync_interval_s=3600)  # the flusher waits: nothing synced
    writer.write(entry(1))
    first = trail.read_anchor(writer.directory)
    assert first is not None and (first.seq, first.hash) == (0, ""), f"no anchor before the first record: {first}"
    assert verify(writer.directory).whole  # a lagging anchor (a crash before the first sync) is no break
    writer.close()
    assert trail.read_anchor(writer.directory).seq == 1


def _run_daemon_with_topic_copy(data: Path, tmp_path: Path) -> None:
    data.mkdir()
    url = f"sqlite:///{data / 'metadata.db'}"
    seed(url, range(0), forged=range(100, 108))  # settled at once as mismatches: eight records
    r = run_cli("enqueue", "--from-file", str(request_file(tmp_path / "r.jsonl", range(100, 108))),
                "--data-dir", str(data))
    assert r.returncode == 0, r.stderr
    r = run_cli("run", "--exit-when-idle", "--max-wait", "60", "--admin-address", f"127.0.0.1:{free_port()}",
                "--data-dir", str(data), *TOPIC_ON, timeout=120)
    assert r.returncode == 0, r.stderr
    assert len(lines(data)[0][1]) == 8


def _rechain(data: Path, records: list[dict]) -> None:
    """What a careful editor does: rewrite every ``prev`` after the change, and the anchor."""
    prev, out = "", []
    for rec in records:
        rec["prev"] = prev
        text = record.line(rec)
        out.append(text + "\n")
        prev = record.digest(text)
    [(path, _)] = lines(data)
    path.write_text("".join(out))
    trail.write_anchor(trail.audit_dir(data), trail.Anchor(records[-1]["seq"], 1, prev))


def test_verify_checks_the_files_against_the_topic_copy(data_dir: Path, tmp_path: Path) -> None:
    _run_daemon_with_topic_copy(data_dir, tmp_path)
    original = [json.loads(x) for x in lines(data_dir)[0][1]]
    assert all(r["request"]["topicName"] == TOPIC for r in original)

    _rechain(data_dir, original[:6])  # seq 7 and 8 cut off, the anchor fixed up to name seq 6
    code, out = _verify(data_dir, *TOPIC_ON)
    assert code == 1, f"the topic copy was not checked: {out}"
    assert "record seq 7: the topic copy has seq 7, 8 that the files do not" in out, out
    assert f"files + topic {AUDIT_TOPIC}" in out and len(out.strip().splitlines()) == 1, out
    code, out = _verify(data_dir, "--files-only")
    assert code == 0 and "checked: files only" in out, out  # the files alone cannot tell

    edited = [dict(r) for r in original]
    edited[3]["reason"] = "nothing to see here"
    _rechain(data_dir, edited)  # record 4 edited, the chain and the anchor rewritten after it
    assert verify(trail.audit_dir(data_dir)).whole
    r = run_cli("audit", "verify", "--json", "--data-dir", str(data_dir), *TOPIC_ON, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["checked"] == "files+topic" and report["firstBadSeq"] == 4
    assert report["topicCopy"]["differing"] == [4, 5, 6, 7, 8] and report["topicCopy"]["missingFromFiles"] == []

    _rechain(data_dir, original)  # as the daemon left it
    code, out = _verify(data_dir, *TOPIC_ON)
    assert code == 0, out
    assert f"checked: files + topic {AUDIT_TOPIC} (8 of its 8 message(s) are this trail's; 0 record(s)" in out, out


def test_the_topic_holds_other_daemons_trails_too(tmp_path: Path) -> None:
    """Every daemon of a cluster copies to the one -AUDIT topic: another data dir's records (their own
    chain, from seq 1) are neither missing from this trail nor differing from it."""
    fill(tmp_path / "a", 6)
    fill(tmp_path / "b", 4)
    mine = [raw.rstrip(b"\n") for _, ls in lines(tmp_path / "a") for raw in (x.encode() for x in ls)]
    theirs = [raw.rstrip(b"\n") for _, ls in lines(tmp_path / "b") for raw in (x.encode() for x in ls)]
    on_topic = [*mine[:3], *theirs, *mine[3:], mine[0], b"not a record"]  # interleaved, one resent
    same = compare(AUDIT_TOPIC, mine, on_topic)
    assert same.whole and (same.ours, same.others, same.not_copied, same.unreadable) == (6, 4, 0, 1)
    cut = compare(AUDIT_TOPIC, mine[:4], on_topic)
    assert cut.missing_from_files == (5, 6) and cut.differing == () and cut.others == 4
    assert compare(AUDIT_TOPIC, mine, on_topic[:3]).whole  # a record not copied is no break
