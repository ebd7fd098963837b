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
  off the end, or the last record edited — no later record links to it;
- the anchor missing or empty while the trail holds records: the writer puts one in
  place before the first record, so it was removed or emptied, and with it the only
  witness of the trail's end: records may have been cut off (named: the seq after the last).

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

    @property
    def whole_before_break(self) -> int:
        """The records before the one the break names (all of them when whole).  Not ``records``: an edited
        record is found on the line after it, so ``records`` counts the edited one too."""
        if self.broken is None:
            return self.records
        return max(0, min(self.records, self.broken.seq - 1))


def verify(directory: Path) -> Verdict:
    files = trail.files(directory)
    state = trail.anchor_file(directory)
    anchor = trail.read_anchor(directory)
    count, last_seq, prev, anchored = 0, 0, "", None
    for _, path in files:
        for number, raw, complete in trail.lines(path):
            if not complete:
                return Verdict(count, len(files), last_seq,
                               Break(last_seq + 1, "truncated: the file ends inside this record", path, number))
            problem = _check(raw, last_seq, prev)
            if problem is not None:
                return Verdict(count, len(files), last_seq, Break(problem[0], problem[1], path, number))
            count, last_seq, prev = count + 1, last_seq + 1, record.digest(raw)
            if anchor is not None and last_seq == anchor.seq:
                anchored = prev
    if state != trail.AnchorFile.WRITTEN and count > 0:
        return Verdict(count, len(files), last_seq, Break(
            last_seq + 1, f"the anchor (audit/{trail.ANCHOR}) is {state.value} although the trail holds records: "
                          "it was removed or emptied, and records may have been cut off the end"))
    return Verdict(count, len(files), last_seq, _check_anchor(anchor, last_seq, anchored))


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


def _check_anchor(anchor: trail.Anchor | None, last_seq: int, anchored_hash: str | None) -> Break | None:
    """The anchor names the last record its writer made durable (it may lag behind the trail, never lead)."""
    if anchor is None or anchor == trail.GENESIS and last_seq == 0:
        return None  # no record, and nothing made durable yet
    if anchor.seq < 0:
        return Break(last_seq, f"the anchor (audit/{trail.ANCHOR}) is unreadable (edited, or torn by a crash)")
    if anchor.seq > last_seq:
        return Break(last_seq + 1, f"missing: the trail ends at seq {last_seq}, but seq {anchor.seq} was written "
                                   "(records cut off the end)")
    if anchor == trail.GENESIS:
        return None  # the first anchor: records appended, none made durable yet (it may lag, never lead)
    if anchored_hash != anchor.hash:
        return Break(anchor.seq, "edited: it does not hash to what its writer recorded in the anchor")
    return None
