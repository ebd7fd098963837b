"""Response models and the request schema, as the OpenAPI document shows them.

The request body is read and validated by hand (see ``request_body.py``: the contract
wants 400 for an invalid payload, FastAPI's automatic validation answers 422,
which this API reserves for "metadata mismatch"), so its schema is attached
here: :class:`DeleteLedgerPayload`'s own JSON schema plus the rules its
validators enforce in code (topic name syntax, which field each component and
type requires).  Keeping those rules in the schema is what lets a fuzzer
generate valid requests — and lets a reader see them.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from deletion_service.admin.answers import HttpOutcome
from deletion_service.protocol.request import DeleteLedgerPayload

REF = "#/components/schemas/{model}"
_ENTITY = "[-=:.A-Za-z0-9_]+"
#: What ``metastore.formats.parse_topic`` accepts: ``persistent://t/ns/x``, ``t/ns/x`` or a bare ``x``.
TOPIC_PATTERN = f"^(persistent://)?{_ENTITY}/{_ENTITY}/[^/]+$|^[^/]+$"


class Answer(BaseModel):
    """The body of every answer that is not data: what happened, and why, in words."""

    outcome: HttpOutcome = Field(description="machine-readable result; see the operation's responses")
    reason: str = Field(description="one line for people; never a traceback or a secret")


class ReadyAnswer(Answer):
    checks: dict[str, str] = Field(description="component → `ok` or why it is unreachable")


class DlqEntryModel(BaseModel):
    """One parked request, as ``ledger-deletion dlq list --json`` prints it."""

    model_config = ConfigDict(extra="forbid")

    messageId: str
    publishedAt: int = Field(description="publish time, epoch ms")
    reason: str = Field(description="short kind (`invalid-request`, `cannot-verify`, `max-retries-reached`, …); "
                                    "`unsealed` when the daemon's seal does not prove why it was parked")
    lastError: str = Field(description="what failed last, as the daemon parked it; empty when unsealed")
    attempts: int = Field(description="RECONSUMETIMES when it was parked; 0 when unsealed")
    request: dict[str, Any] | None = Field(description="the decoded request; null when undecodable")
    payloadBase64: str | None = Field(description="the raw payload when undecodable; else null")
    topic: str = Field(description="the DLQ topic it is parked on (a requeue sends it back to that topic's "
                                   "request topic)")
    sealed: bool = Field(description="whether the daemon parked it and sealed its reason, last error and attempts "
                                     "(a message anyone else put in the DLQ is listed, its own words never shown)")


def payload_schemas() -> dict[str, Any]:
    """``components.schemas`` entries for the request body: ``DeleteLedgerPayload`` and its parts."""
    schema = copy.deepcopy(DeleteLedgerPayload.model_json_schema(by_alias=True, ref_template=REF))
    defs = schema.pop("$defs", {})
    props = schema["properties"]
    props["topicName"].update(
        pattern=TOPIC_PATTERN,
        description="a persistent topic: `persistent://tenant/ns/topic` (`tenant/ns/topic` and a bare name "
                    "in `public/default` are accepted, as Pulsar does)")
    props["ledgerId"]["description"] = "the BookKeeper ledger id"
    props["offloadContext"]["description"] = "where the offloaded copy lives; required for OFFLOAD_LEDGER"
    schema["allOf"] = [
        _requires("ledgerComponent", "MANAGED_CURSOR", "cursorName", {"type": "string", "minLength": 1}),
        _requires("ledgerComponent", "DELAYED_INDEX_BUCKET", "cursorName", {"type": "string", "minLength": 1}),
        _requires("ledgerComponent", "SCHEMA_STORAGE", "schemaId", {"type": "string", "minLength": 1}),
        _requires("ledgerType", "OFFLOAD_LEDGER", "offloadContext", {"$ref": REF.format(model="OffloadContextRef")}),
    ]
    schema["examples"] = [{"topicName": "persistent://public/default/orders", "ledgerComponent": "MANAGED_LEDGER",
                           "ledgerType": "LEDGER", "ledgerId": 12345}]
    return {"DeleteLedgerPayload": schema, **defs}


def _requires(key: str, value: str, field: str, field_schema: dict[str, Any]) -> dict[str, Any]:
    return {"if": {"properties": {key: {"const": value}}, "required": [key]},
            "then": {"properties": {field: field_schema}, "required": [field]}}
