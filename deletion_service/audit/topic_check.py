"""The trail's files against their copy on ``<deletion topic>-AUDIT``: what one has that the other lacks.

Why: the anchor and the chain live in the same directory as the records, so whoever
can edit the files can also rewrite every later record and the anchor; the topic copy
is the witness outside the data dir (``publish.py``).  This compares the two, byte for
byte, and judges nothing else (the chain itself is ``verify.py``'s).

Which topic records are this trail's: the topic is shared by every daemon that writes
to the cluster, each with its own data dir and chain.  Records are linked by ``prev``
(the hash of the line before), and a restarted daemon continues its data dir's chain,
so one trail is one connected set of records on the topic.  A topic record is this
trail's when its set holds a line of the files, or a record written by a daemon
instance that also wrote to the files.  What the comparison can then say:

- on the topic, not in the files, no file record with its seq: **missing from the
  files** (cut off the end, or removed) — a break;
- on the topic with a seq the files also have, in other bytes, and no topic record
  of that seq is the files' own: **differs** (edited in the files, or a rewritten
  chain) — a break;
- in the files, not on the topic: **not copied** — reported, not a break: the copy is
  best effort (a broker that refused it; ``publish.py`` logged the drop);
- on the topic and of no chain the files touch: **other trails** (other daemons' data
  dirs, or this one's if all its files were removed: the count says so).

The topic is a witness, not an authority: whoever may produce to it can add records.
An added record whose seq the files have, beside the genuine copy, changes nothing
(the genuine copy matches); any message parses or counts as unreadable, never raises.
A break it reports is a disagreement, so the wording names both possibilities.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from deletion_service.audit import record


@dataclass(frozen=True)
class TopicComparison:
    topic: str
    read: int  # messages on the topic
    ours: int  # of them, distinct records of this trail
    missing_from_files: tuple[int, ...]  # seqs the topic has and the files do not
    differing: tuple[int, ...]  # seqs whose record on the topic is not the one in the files
    not_copied: int  # file records the topic lacks (the copy is best effort)
    others: int  # distinct records of other trails
    unreadable: int  # topic messages that are not records

    @property
    def whole(self) -> bool:
        return not self.missing_from_files and not self.differing

    @property
    def first_bad_seq(self) -> int | None:
        """The first seq the files and the topic disagree on (None when they agree)."""
        return min((*self.missing_from_files, *self.differing), default=None)

    def describe(self) -> str:
        parts = []
        if self.missing_from_files:
            parts.append(f"the topic copy has {_seqs(self.missing_from_files)} that the files do not "
                         "(cut off the end or removed; or written to the topic by someone else)")
        if self.differing:
            parts.append(f"{_seqs(self.differing)} differ from the topic copy (edited in the files, "
                         "or the chain rewritten; or written to the topic by someone else)")
        return "; ".join(parts)

    def summary(self) -> str:
        return (f"{self.ours} of its {self.read} message(s) are this trail's; {self.not_copied} record(s) of the "
                f"files not on it (a best-effort copy); {self.others} record(s) of other trails; "
                f"{self.unreadable} unreadable")

    def as_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "read": self.read, "ours": self.ours,
                "missingFromFiles": list(self.missing_from_files), "differing": list(self.differing),
                "notCopied": self.not_copied, "others": self.others, "unreadable": self.unreadable}


def compare(topic: str, file_lines: Sequence[bytes], topic_messages: Iterable[bytes]) -> TopicComparison:
    """``file_lines``: every complete line of the trail's files, in order; ``topic_messages``: the topic's."""
    files: dict[str, dict[str, Any]] = {}  # digest → record, the lines of the files that are records
    for raw in file_lines:
        rec = _parse(raw)
        if rec is not None:
            files[record.digest(raw)] = rec
    topic_records: dict[str, dict[str, Any]] = {}  # digest → record, duplicates (resends) once
    read = unreadable = 0
    for raw in topic_messages:
        read += 1
        rec = _parse(raw)
        if rec is None:
            unreadable += 1
        else:
            topic_records.setdefault(record.digest(raw), rec)
    ours = _this_trail(files, topic_records)
    by_seq = {rec["seq"] for rec in files.values()}
    missing = sorted({topic_records[d]["seq"] for d in ours if d not in files and topic_records[d]["seq"]
                      not in by_seq})
    confirmed = {topic_records[d]["seq"] for d in ours if d in files}  # seqs whose genuine copy is on the topic
    differing = sorted({topic_records[d]["seq"] for d in ours if d not in files and topic_records[d]["seq"]
                        in by_seq} - confirmed)
    return TopicComparison(topic, read, len(ours), tuple(missing), tuple(differing),
                           not_copied=sum(1 for d in files if d not in topic_records),
                           others=len(topic_records) - len(ours), unreadable=unreadable)


def _this_trail(files: dict[str, dict[str, Any]], topic: dict[str, dict[str, Any]]) -> set[str]:
    """The digests of the topic records linked (by ``prev``, either way) to a file line or written by one
    of the files' daemon instances."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for digest, rec in (*files.items(), *topic.items()):
        if rec["prev"]:
            parent[find(digest)] = find(rec["prev"])
        else:
            find(digest)
    daemons = {_daemon(rec) for rec in files.values()} - {None}
    roots = {find(d) for d in files} | {find(d) for d, rec in topic.items() if _daemon(rec) in daemons}
    return {d for d in topic if find(d) in roots}


def _daemon(rec: dict[str, Any]) -> str | None:
    return rec["daemon"] if isinstance(rec["daemon"], str) else None


def _parse(raw: bytes) -> dict[str, Any] | None:
    """A record, or None for anything else: the topic takes any bytes (deep nesting raises
    RecursionError in ``json``, not ValueError), and one message must not stop a verify."""
    try:
        return record.parse(raw)
    except Exception:  # noqa: BLE001 - see the docstring
        return None


def _seqs(seqs: Sequence[int]) -> str:
    shown = ", ".join(map(str, seqs[:10])) + (f" … ({len(seqs)} in all)" if len(seqs) > 10 else "")
    return f"seq {shown}"
