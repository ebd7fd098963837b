"""An audit record's ``request`` is built directly (``PendingDeleteLedgerInfo.wire``), not through
pydantic's serializer, and the writer encodes a built record as it is (``record.built_line``): on
1,500 varied requests the body and the whole line are byte for byte what ``model_dump(mode="json",
by_alias=True)`` and ``record.line`` gave."""

from __future__ import annotations

import json
import random

from deletion_service.audit import record
from deletion_service.audit.record import Entry
from deletion_service.delete_phase.rules.decision import Action, Verdict
from deletion_service.delete_phase.rules.facts import Evidence
from deletion_service.protocol.fate import Outcome
from deletion_service.protocol.request import LedgerComponent, PendingDeleteLedgerInfo, Reason, decode
from metastore.formats import schema_id

NAMES = ["orders", "ordres-été", "日本語", "a%2Fb", "with space", "quote\"d", "back\\slash", "emoji-🙂", "x" * 200]


def _request(rng: random.Random) -> PendingDeleteLedgerInfo:
    topic = f"persistent://{rng.choice(['t', 'te-nant.1'])}/{rng.choice(['ns', 'n-s'])}/{rng.choice(NAMES)}"
    if rng.random() < 0.3:
        topic += f"-partition-{rng.randrange(8)}"
    component = rng.choice(list(LedgerComponent))
    body: dict[str, object] = {"topicName": topic, "ledgerComponent": component.value, "ledgerType": "LEDGER",
                               "ledgerId": rng.choice([0, 1, rng.randrange(2**63)]),
                               "markedAt": rng.choice([0, 1_700_000_000_000, rng.randrange(2**62)]),
                               "reason": rng.choice(list(Reason)).value}
    if component in (LedgerComponent.MANAGED_CURSOR, LedgerComponent.DELAYED_INDEX_BUCKET):
        body["cursorName"] = rng.choice(NAMES)
    if component == LedgerComponent.SCHEMA_STORAGE:
        body["schemaId"] = schema_id(topic)
    if component == LedgerComponent.MANAGED_LEDGER and rng.random() < 0.2:  # falls back to model_dump
        body.update(ledgerType="OFFLOAD_LEDGER", offloadContext={
            "uidMsb": rng.randrange(-(2**63), 2**63), "uidLsb": 7, "driverName": "aws-s3",
            "driverMetadata": {"bucket": "b", "region": "eu-west-1"}})
    if rng.random() < 0.2:
        body["unknownField"] = "ignored"
    return decode(json.dumps(body, ensure_ascii=rng.random() < 0.5).encode())


def test_the_request_body_is_model_dumps_byte_for_byte() -> None:
    rng = random.Random(29)
    action = Action(Verdict.DELETE_BOOKKEEPER, "deleted",
                    evidence=Evidence(bk_version=3, custom_metadata=(("application", "pulsar"),)))
    for _ in range(1500):
        request = _request(rng)
        dumped = request.model_dump(mode="json", by_alias=True)
        assert list(request.wire().items()) == list(dumped.items()), request
        entry = Entry.of(request, action, Outcome.DELETED)
        old = Entry(dumped, entry.outcome, entry.reason, entry.evidence)
        built = record.build(entry, 5, 6, "d", "p")
        assert record.built_line(built) == record.line(built) == record.line(record.build(old, 5, 6, "d", "p"))
