"""``enqueue``: send requests an operator (or a scan) wrote; never touches metadata.

A request file is validated whole before anything is sent, so a typo on line
9,000 does not leave 8,999 requests half-submitted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from deletion_service.broker.interface import BrokerError
from deletion_service.errors import UserError
from deletion_service.protocol.request import (
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


#: Requests per pipelined batch in :func:`send_all`: progress moves per batch, and a batch with a
#: failure stops the next ones (the broker is probably down: better to say so than to push on).
SEND_BATCH = 1000


class NotAllSent(BrokerError):
    """Some requests were not receipted.  ``message_ids`` holds one entry per request, in order:
    its message id, or ``None`` when it failed or was not attempted (pipelining means requests after
    a failed one may well have been sent, so a count "before the failure" would be wrong)."""

    def __init__(self, first: BrokerError, message_ids: list[str | None]) -> None:
        self.first = first
        self.message_ids = message_ids
        super().__init__(f"{first}; sent {self.sent} of {len(message_ids)}")

    @property
    def sent(self) -> int:
        return sum(message_id is not None for message_id in self.message_ids)

    def unsent(self) -> list[int]:
        """Positions (0-based, in the order given) of the requests that were not receipted."""
        return [i for i, message_id in enumerate(self.message_ids) if message_id is None]


def send_all(requests: Sequence[PendingDeleteLedgerInfo],
             send: Callable[[Sequence[PendingDeleteLedgerInfo]], list[str | BrokerError]],
             progress: Callable[[int], None] | None = None) -> list[str]:
    """Send pipelined, :data:`SEND_BATCH` at a time; every message id once all were receipted.

    A failure stops after its batch and raises :class:`NotAllSent`, which says exactly which
    requests were receipted.  Sending one twice is harmless (deletion is idempotent), so the
    operator can resend the file or the ones reported."""
    ids: list[str | None] = []
    sent = 0
    first: BrokerError | None = None
    for start in range(0, len(requests), SEND_BATCH):
        batch = requests[start:start + SEND_BATCH]
        if first is not None:
            ids += [None] * len(batch)
            continue
        answers = send(batch)
        if len(answers) != len(batch):
            raise RuntimeError(f"the sender answered {len(answers)} times for {len(batch)} requests")
        for answer in answers:
            if isinstance(answer, str):
                ids.append(answer)
                sent += 1
            else:
                ids.append(None)
                first = first or (answer if isinstance(answer, BrokerError) else BrokerError(f"no receipt: {answer!r}"))
        if progress is not None:
            progress(sent)
    if first is not None:
        raise NotAllSent(first, ids)
    return [i for i in ids if i is not None]
