"""What an operator reads of each settled request: one line per request, or one per call for the many.

A routine outcome (``deleted``, ``absent``) is logged at INFO once per call of the disposer per topic,
ledger type and outcome, naming the count and every ledger id (``deleted 1000 ledger(s) of
persistent://t/ns/orders: 1, 2, …``, so ``grep -w 523`` finds it); each request's own line for those
moves to DEBUG.  At thousands of deletions a second a line each would be most of the log and over a
tenth of the worker's time, and the audit trail records each deletion anyway.

Dead letters are summed the same way, at WARNING, once per call and DLQ reason, with the count, the
first one's detail and a few ids (each request's own line at DEBUG): a flood of 50,000 invalid requests
wrote 50,000 WARNING lines, and pushed every other warning out of ``status``'s recent problems, while
``dlq list`` names each parked request anyway.  Every other outcome (in use, mismatch, a reconsume)
keeps its own line at its own level: those need reading one by one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from deletion_service.broker.interface import display_message_id
from deletion_service.delete_phase.consumer import copies
from deletion_service.delete_phase.rules.lifecycle import MessageInHand
from deletion_service.delete_phase.rules.outward import Outward
from deletion_service.protocol.fate import Outcome
from deletion_service.protocol.request import LedgerType

#: the disposer's own logger: these lines are the disposer's account of what it settled
_log = logging.getLogger("deletion_service.delete_phase.consumer.disposer")

#: Outcomes logged once per call per topic, each request's own line at DEBUG.
ROUTINE = frozenset({Outcome.DELETED, Outcome.ABSENT})

#: Ids a dead-letter line names (the rest are counted; ``dlq list`` names them all).
DEAD_LETTER_IDS = 5


@dataclass
class _DeadLetters:
    """One call's dead letters of one DLQ reason: how many, the first's detail, the first few ids."""

    count: int = 0
    first_detail: str = ""
    ids: list[str] = field(default_factory=list)
    ledgers: list[int] = field(default_factory=list)


class OutcomeLines:
    """Collects a call's routine outcomes and logs every other one at once."""

    def __init__(self) -> None:
        #: routine outcomes settled in the current call: (outcome, topic, ledger type) -> ledger ids, in order
        self._routine: dict[tuple[Outcome, str, LedgerType], list[int]] = {}
        #: dead letters settled in the current call, by DLQ reason
        self._dead: dict[str, _DeadLetters] = {}

    def add(self, d: MessageInHand, out: Outward) -> None:
        """A routine outcome joins its call's line (its own line at DEBUG); any other gets its own line."""
        level = out.log_level
        if d.request is not None and out.outcome in ROUTINE:
            self._routine.setdefault((out.outcome, d.request.topic_name, d.request.ledger_type), []).append(
                d.request.ledger_id)
            if not _log.isEnabledFor(logging.DEBUG):
                return
            level = logging.DEBUG
        action = d.decided
        message_id = display_message_id(d.message.message_id)  # as the CLI shows and takes it: L:E[:P[:B]]
        if out.outcome == Outcome.DLQ:
            self._dead_letter(d, out.dlq_reason or "unknown", action.reason, message_id)
            if not _log.isEnabledFor(logging.DEBUG):
                return
            level = logging.DEBUG
        what = d.request.describe() if d.request else f"message {message_id}"
        fields = {"outcome": out.outcome.value, "reason": action.reason, "messageId": message_id,
                  "attempts": copies.attempts(d.message)}
        if d.request is not None:
            fields.update(ledger=d.request.ledger_id, ledgerType=d.request.ledger_type.value,
                          topic=d.request.topic_name)
        # "deleted (deleted)" said it twice: the reason only when it adds something
        detail = "" if action.reason in (out.outcome.value, "deleted", "absent") else f" ({action.reason})"
        _log.log(level, "%s: %s%s", what, out.outcome.value, detail, extra=fields)

    def _dead_letter(self, d: MessageInHand, reason: str, detail: str, message_id: str) -> None:
        group = self._dead.setdefault(reason, _DeadLetters(first_detail=detail))
        group.count += 1
        if len(group.ids) < DEAD_LETTER_IDS:
            group.ids.append(f"ledger {d.request.ledger_id}" if d.request is not None else f"message {message_id}")
            if d.request is not None:
                group.ledgers.append(d.request.ledger_id)

    def flush(self) -> None:
        """The call's routine lines, one per (outcome, topic, ledger type); its dead letters, one per reason."""
        routine, self._routine = self._routine, {}
        for (outcome, topic, ledger_type), ids in routine.items():
            what = "offloaded ledger(s)" if ledger_type == LedgerType.OFFLOAD_LEDGER else "ledger(s)"
            text = (f"deleted {len(ids)} {what} of {topic}" if outcome == Outcome.DELETED else
                    f"{len(ids)} {what} of {topic} already gone from storage, nothing to delete (requests "
                    "acknowledged)")
            _log.info("%s: %s", text, ", ".join(map(str, ids)),
                      extra={"outcome": outcome.value, "topic": topic, "ledgerType": ledger_type.value,
                             "ledgers": ids, "count": len(ids)})
        dead, self._dead = self._dead, {}
        for reason, group in dead.items():
            more = f" and {group.count - len(group.ids)} more" if group.count > len(group.ids) else ""
            _log.warning("parked %d request(s) in the DLQ, reason %s (first: %s): %s%s; `ledger-deletion dlq list "
                         "--reason %s` shows each", group.count, reason, group.first_detail, ", ".join(group.ids),
                         more, reason, extra={"outcome": Outcome.DLQ.value, "reason": reason, "count": group.count,
                                              "ledgers": group.ledgers})
