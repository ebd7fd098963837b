"""``scan-orphans --enqueue``'s requests, row by row (pure; the real-process run: test_scan_enqueue_drain)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deletion_service.orphans.inventory import OffloadScope
from deletion_service.orphans.requests import java_halves, object_request_for, request_for
from deletion_service.protocol.request import LedgerComponent, LedgerType, Reason
from offloaders.interface import java_uuid
from offloaders.registry import OffloaderSettings

TOPIC = "persistent://t/ns/orders"


def _row(kind: str, **extra: object) -> dict:
    return {"ledgerId": 7, "topic": TOPIC, "kind": kind, "component": "c", "cursor": None, "schemaId": None, **extra}


@pytest.mark.parametrize("row,component,cursor,schema", [
    (_row("data"), LedgerComponent.MANAGED_LEDGER, None, None),
    (_row("cursor", cursor="sub"), LedgerComponent.MANAGED_CURSOR, "sub", None),
    (_row("schema", schemaId="t/ns/orders"), LedgerComponent.SCHEMA_STORAGE, None, "t/ns/orders"),
    (_row("compacted"), LedgerComponent.COMPACTED_LEDGER, None, None),
    (_row("delayed-bucket", cursor="sub"), LedgerComponent.DELAYED_INDEX_BUCKET, "sub", None),
])
def test_every_kind_has_its_request(row: dict, component: LedgerComponent, cursor: str | None,
                                    schema: str | None) -> None:
    req = request_for(row, 1000)
    assert not isinstance(req, str), req
    assert (req.ledger_component, req.cursor_name, req.schema_id, req.topic_name) == (component, cursor, schema, TOPIC)
    assert (req.ledger_type, req.reason, req.marked_at, req.ledger_id) == (LedgerType.LEDGER, Reason.ORPHAN, 1000, 7)


def test_what_has_no_request_is_said() -> None:
    assert request_for(_row("other", component="something-new"), 0) == "no request type for component 'something-new'"
    assert request_for(_row("data", topic=None), 0) == "its metadata names no topic"
    assert request_for(_row("delayed-bucket"), 0).startswith("invalid request")  # no cursor: never guessed


def test_an_orphan_object_is_requested_where_it_was_found(tmp_path: Path) -> None:
    scope = OffloadScope(OffloaderSettings(filesystem_base_dir=tmp_path), "aws-s3", (("region", "eu-west-1"),))
    uid = java_uuid(-5, 6)
    fs = object_request_for({"location": f"filesystem://{tmp_path}", "uuid": uid, "ledgerId": 2, "topic": TOPIC},
                            scope, 9)
    assert not isinstance(fs, str), fs
    ctx = fs.offload_context
    assert (fs.ledger_type, fs.ledger_component, fs.reason, fs.ledger_id) == (
        LedgerType.OFFLOAD_LEDGER, LedgerComponent.MANAGED_LEDGER, Reason.ORPHAN, 2)
    assert (ctx.uid_msb, ctx.uid_lsb, ctx.driver_name, ctx.driver_metadata) == (
        -5, 6, "filesystem", {"storageBasePath": str(tmp_path)})
    s3 = object_request_for({"location": "s3://b?endpoint=http://127.0.0.1:9", "uuid": uid, "ledgerId": 2,
                             "topic": TOPIC}, scope, 9)
    assert s3.offload_context.driver_metadata == {"bucket": "b", "serviceEndpoint": "http://127.0.0.1:9",
                                                  "region": "eu-west-1"}
    assert object_request_for({"location": "s3://b", "uuid": uid, "ledgerId": None, "topic": TOPIC}, scope, 9) == \
        "streaming-offload segment: only its index names its ledgers"
    assert object_request_for({"location": "s3://b", "uuid": uid, "ledgerId": 2, "topic": None}, scope, 9) == \
        "offloaded object: nothing names its topic"
    assert "driver not implemented" in object_request_for(
        {"location": "google-cloud-storage://g", "uuid": uid, "ledgerId": 2, "topic": TOPIC}, scope, 9)


@pytest.mark.parametrize("msb,lsb", [(0, 1), (-1, -1), (2**63 - 1, -(2**63)), (11, -11)])
def test_java_halves_inverts_java_uuid(msb: int, lsb: int) -> None:
    assert java_halves(java_uuid(msb, lsb)) == (msb, lsb)
