"""``enqueue``: send requests an operator (or a scan) wrote; never touches metadata.

A request file is validated whole before anything is sent, so a typo on line
9,000 does not leave 8,999 requests half-submitted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from deletion_service.errors import UserError
from deletion_service.model import (
    InvalidRequest,
    LedgerComponent,
    LedgerType,
    PendingDeleteLedgerInfo,
    Reason,
    decode,
)


def read_requests(path: Path, clock: Callable[[], float] = time.time) -> list[PendingDeleteLedgerInfo]:
    """Every line a ``PendingDeleteLedgerInfo``; ``markedAt`` and ``reason`` default to now and ``manual``."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError as e:
        raise UserError(f"request file {path} does not exist") from e
    except UnicodeDecodeError as e:
        raise UserError(f"request file {path} is not UTF-8 text") from e
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror}") from e
    now_ms = int(clock() * 1000)
    out = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{path}:{number}: not JSON ({e.msg} at column {e.colno}); nothing was sent") from e
        if isinstance(obj, dict):
            obj.setdefault("markedAt", now_ms)
            obj.setdefault("reason", Reason.MANUAL.value)
        try:
            out.append(decode(json.dumps(obj).encode()))
        except InvalidRequest as e:
            raise UserError(f"{path}:{number}: {e}; nothing was sent") from e
    if not out:
        raise UserError(f"request file {path} holds no requests")
    return out


def single_request(topic: str, ledger_id: int, component: str = "MANAGED_LEDGER", cursor: str | None = None,
                   schema_id: str | None = None, clock: Callable[[], float] = time.time) -> PendingDeleteLedgerInfo:
    """A manual BookKeeper-ledger request (offloaded copies need the offload context: use a file)."""
    try:
        comp = LedgerComponent(component.upper())
    except ValueError as e:
        raise UserError(f"--component must be one of {', '.join(c.value for c in LedgerComponent)}") from e
    body = {"topicName": topic, "ledgerComponent": comp.value, "cursorName": cursor, "schemaId": schema_id,
            "ledgerType": LedgerType.LEDGER.value, "ledgerId": ledger_id, "markedAt": int(clock() * 1000),
            "reason": Reason.MANUAL.value}
    try:
        return decode(json.dumps(body).encode())
    except InvalidRequest as e:
        raise UserError(f"invalid request: {e}") from e


def send_all(requests: Iterable[PendingDeleteLedgerInfo], send: Callable[[PendingDeleteLedgerInfo], str],
             progress: Callable[[int], None] | None = None) -> list[str]:
    """Send in order, each waiting for its receipt; a failure stops with how many were sent."""
    ids: list[str] = []
    for request in requests:
        ids.append(send(request))
        if progress is not None:
            progress(len(ids))
    return ids
