"""One audit record: its fields, its one spelling as a line, and the hash that chains it.

The record format is the contract of DESIGN.md ("Tenancy and audit"):
``{"seq", "at", "daemon", "request", "outcome", "reason", "evidence": {"bkVersion",
"customMetadata", "references", "offloadObjects": [{"key", "size"}]}, "prev"}``.
A line is the record as compact JSON in exactly that key order; ``prev`` is the hex
SHA-256 of the previous record's line (its UTF-8 bytes, without the newline), so
the chain is checked on the bytes written, never on a re-encoding of them.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from deletion_service.broker.interface import Received, display_message_id
from deletion_service.delete_phase.rules.decision import Action
from deletion_service.delete_phase.rules.facts import Evidence
from deletion_service.protocol.fate import Outcome
from deletion_service.protocol.request import PendingDeleteLedgerInfo

#: Every record's keys, in the order a line spells them.
FIELDS = ("seq", "at", "daemon", "request", "outcome", "reason", "evidence", "prev")
EVIDENCE_FIELDS = ("bkVersion", "customMetadata", "references", "offloadObjects")


def daemon_instance() -> str:
    """Who wrote a record: host, process and start time, so two runs of one host never look alike."""
    return f"{socket.gethostname()}:{os.getpid()}:{int(time.time() * 1000)}"


@dataclass(frozen=True)
class Entry:
    """What a settled request contributes to its record; the writer adds seq, at, daemon and prev."""

    request: dict[str, Any] | None
    outcome: str
    reason: str
    evidence: dict[str, Any]

    @classmethod
    def of(cls, request: PendingDeleteLedgerInfo | None, action: Action, outcome: Outcome,
           message: Received | None = None) -> Entry:
        """The entry of one settled request; an undecodable message (``request`` None) is named
        by its message id and payload digest, as its DLQ copy is, so the two can be matched."""
        reason = action.reason
        if request is None and message is not None:
            digest = hashlib.sha256(message.data).hexdigest()
            reason += (f" (message {display_message_id(message.message_id)} on {message.topic}: "
                       f"{len(message.data)} bytes, sha256 {digest})")
        body = request.wire() if request is not None else None
        return cls(body, outcome.value, reason, evidence_json(action.evidence))


def evidence_json(evidence: Evidence | None) -> dict[str, Any]:
    e = evidence or Evidence()
    return {
        "bkVersion": e.bk_version,
        "customMetadata": dict(e.custom_metadata),
        "references": list(e.references),
        "offloadObjects": [{"key": o.key, "size": o.size} for o in e.offload_objects],
    }


def build(entry: Entry, seq: int, at_ms: int, daemon: str, prev: str) -> dict[str, Any]:
    return {"seq": seq, "at": at_ms, "daemon": daemon, "request": entry.request, "outcome": entry.outcome,
            "reason": entry.reason, "evidence": entry.evidence, "prev": prev}


#: One encoder for every line: ``json.dumps`` with options builds a new one per call (a daemon writes
#: thousands of records a second).  Its output is ``json.dumps``'s with the same options, byte for byte.
_LINE_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def line(record: dict[str, Any]) -> str:
    """The record's one spelling: compact JSON, contract key order, UTF-8 as is."""
    return _LINE_ENCODER.encode({k: record[k] for k in FIELDS})


def built_line(record: dict[str, Any]) -> str:
    """:func:`line` of a record :func:`build` made, whose keys are in contract order already."""
    return _LINE_ENCODER.encode(record)


def digest(text: str | bytes) -> str:
    """What the next record's ``prev`` holds: the hex SHA-256 of this line's bytes (no newline)."""
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def parse(raw: bytes) -> dict[str, Any]:
    """A line back into a record; ValueError when it is not one (for ``verify`` and the reader)."""
    try:
        record = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"not JSON ({e})") from None
    if not isinstance(record, dict) or set(record) != set(FIELDS):
        raise ValueError("not an audit record (its keys are not " + ", ".join(FIELDS) + ")")
    if not isinstance(record["seq"], int) or isinstance(record["seq"], bool) or not isinstance(record["prev"], str):
        raise ValueError("not an audit record (seq must be a number, prev a string)")
    return record
