"""Walk the chain and name the first record that breaks it.

A record is whole when its seq follows the one before it and its ``prev`` is the
SHA-256 of the line before it.  What each break means, and the seq it names:

- a line that is not a record, or a file that ends inside one (truncated): the seq
  that should have been there;
- a seq past the expected one: that record was removed (or records reordered):
  the expected seq;
- a seq at or before the last one seen: a repeated or reordered record: its seq;
- a ``prev`` that does not match: the record before it was edited (or this one's
  ``prev`` was): the record before it, the first that can be wrong;
- the anchor (``trail.py``) naming a record the trail does not end with: records cut
  off the end, or the last record edited — no later record links to it.

This finds any edit that does not rewrite every later record, the anchor and the
topic copy alike; the chain makes tampering evident, not impossible.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from deletion_service.audit import record, trail


@dataclass(frozen=True)
class Break:
    seq: int
    what: str
    file: Path | None = None
    line: int = 0

    def describe(self) -> str:
        where = f" ({self.file.name}:{self.line})" if self.file is not None else ""
        return f"record seq {self.seq}: {self.what}{where}"


@dataclass(frozen=True)
class Verdict:
    records: int
    files: int
    last_seq: int
    broken: Break | None = None

    @property
    def whole(self) -> bool:
        return self.broken is None


def verify(directory: Path) -> Verdict:
    files = trail.files(directory)
    count, last_seq, prev = 0, 0, ""
    for _, path in files:
        for number, raw, complete in trail.lines(path):
            if not complete:
                return Verdict(count, len(files), last_seq,
                               Break(last_seq + 1, "truncated: the file ends inside this record", path, number))
            problem = _check(raw, last_seq, prev)
            if problem is not None:
                return Verdict(count, len(files), last_seq, Break(problem[0], problem[1], path, number))
            count, last_seq, prev = count + 1, last_seq + 1, record.digest(raw)
    broken = _check_anchor(trail.read_anchor(directory), last_seq, prev)
    return Verdict(count, len(files), last_seq, broken)


def _check(raw: bytes, last_seq: int, prev: str) -> tuple[int, str] | None:
    """Why this line does not continue the chain that ended at ``last_seq`` (hash ``prev``), if it does not."""
    try:
        rec = record.parse(raw)
    except ValueError as e:
        return last_seq + 1, f"unreadable: {e}"
    seq = rec["seq"]
    if seq > last_seq + 1:
        return last_seq + 1, f"missing: seq {seq} follows seq {last_seq} (removed, or records reordered)"
    if seq <= last_seq:
        return seq, f"out of order: seq {seq} follows seq {last_seq} (repeated or reordered)"
    if rec["prev"] != prev:
        if last_seq == 0:
            return seq, "the first record's prev is not empty (records before it were removed)"
        return last_seq, (f"edited: its line does not hash to the prev of seq {seq} "
                          f"(or that record's prev was edited)")
    if record.line(rec).encode() != raw:
        return seq, "edited: not in the writer's spelling (keys reordered or reformatted)"
    return None


def _check_anchor(anchor: trail.Anchor | None, last_seq: int, last_hash: str) -> Break | None:
    if anchor is None:
        return None  # nothing written yet, or a trail from before anchors: the links are all there is
    if anchor.seq < 0:
        return Break(last_seq, "the anchor (audit/anchor.json) is unreadable")
    if anchor.seq > last_seq:
        return Break(last_seq + 1, f"missing: the trail ends at seq {last_seq}, but seq {anchor.seq} was written "
                                   "(records cut off the end)")
    if anchor.seq == last_seq and anchor.hash != last_hash:
        return Break(last_seq, "edited: the last record does not hash to what its writer recorded")
    return None
