"""The audit record of a request an operator purged or requeued: the daemon's record format, and words
that name the command, the operator, the message and where it went."""

from __future__ import annotations

import hashlib

from deletion_service.audit import record
from deletion_service.audit.operator_actions import PURGED, REQUEUED, entry
from deletion_service.broker.interface import Received
from deletion_service.delete_phase.rules.seal import ParkedSeal
from deletion_service.dlq.operations import Settling
from deletion_service.dlq.operations import entry as listed

DLQ = "persistent://t/ns/__ledger_deletion-DLQ"
BODY = (b'{"topicName":"persistent://t/ns/orders","ledgerComponent":"MANAGED_LEDGER","ledgerType":"LEDGER",'
        b'"ledgerId":42,"markedAt":1,"reason":"manual"}')


SEAL = ParkedSeal(b"k" * 32)


def _parked(data: bytes) -> Received:
    """Parked as the daemon parks it: its reason and count sealed."""
    props = {"reason": "delete-failed", "lastError": "", "RECONSUMETIMES": "3",
             "ledgerDeletionParkedSeal": SEAL.seal("delete-failed", "", 3, DLQ, data) or ""}
    return Received(data, props, DLQ, "(17,4,-1,-1)", 1_700_000_000_000)


def test_a_requeued_request_is_recorded_in_the_daemons_format_naming_where_it_went() -> None:
    message = _parked(BODY)
    e = entry(REQUEUED, Settling(listed(message, DLQ, SEAL), message, DLQ, "persistent://t/ns/__ledger_deletion",
                                 "9:0"), "alice@host")
    rec = record.parse(record.line(record.build(e, 7, 1_800_000_000_000, "host:1:2", "")).encode())
    assert rec["outcome"] == "requeued" and rec["request"]["ledgerId"] == 42
    assert rec["reason"] == (f"dlq requeue by alice@host: message 17:4 left {DLQ} (parked for delete-failed, "
                             "3 attempt(s)); sent back to persistent://t/ns/__ledger_deletion as 9:0")
    assert rec["evidence"] == {"bkVersion": None, "customMetadata": {}, "references": [], "offloadObjects": []}


def test_an_undecodable_purged_message_is_named_by_its_id_and_digest() -> None:
    message = _parked(b"\xff not a request")
    e = entry(PURGED, Settling(listed(message, DLQ, SEAL), message, DLQ), "bob@host")
    assert e.request is None and e.outcome == "purged"
    assert e.reason.startswith(f"dlq purge by bob@host: message 17:4 left {DLQ}")
    assert f"15 bytes, sha256 {hashlib.sha256(message.data).hexdigest()}" in e.reason
