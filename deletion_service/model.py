"""The deletion request on the wire: ``PendingDeleteLedgerInfo`` and ``DeleteLedgerPayload``.

Messages cross process and version boundaries (a broker-side producer, our
CLI, the admin API), so validation is strict about what the protocol needs and
lenient about the rest: unknown fields are ignored, field names are the
camelCase of the design, and the JSON we write is stable (fixed field order,
no whitespace) so the same request always serialises the same way.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from metastore.formats import FormatError, parse_topic


def _integral(value: Any) -> Any:
    """JSON numbers like ``5.0`` are integers to JSON Schema and to Java's JSON libraries;
    accept them exactly (never ``5.5``, never strings, never huge floats that lost digits)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1, strict=True), BeforeValidator(_integral)]
LedgerId = Annotated[int, Field(ge=0, le=2**63 - 1, strict=True), BeforeValidator(_integral)]


class LedgerComponent(StrEnum):
    MANAGED_LEDGER = "MANAGED_LEDGER"
    MANAGED_CURSOR = "MANAGED_CURSOR"
    SCHEMA_STORAGE = "SCHEMA_STORAGE"


class LedgerType(StrEnum):
    LEDGER = "LEDGER"
    OFFLOAD_LEDGER = "OFFLOAD_LEDGER"


class Reason(StrEnum):
    TRIM = "trim"
    ORPHAN = "orphan"
    MANUAL = "manual"
    TOPIC_DELETED = "topic-deleted"


class InvalidRequest(ValueError):
    """The payload cannot be a deletion request; the message says which field and why."""


class _Wire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)


class SegmentRef(_Wire):
    uid_msb: Int64
    uid_lsb: Int64


class OffloadContextRef(_Wire):
    """Where the offloaded copy lives: enough to name and delete its objects."""

    uid_msb: Int64
    uid_lsb: Int64
    driver_name: Annotated[str, Field(min_length=1)]
    driver_metadata: dict[str, str] = Field(default_factory=dict)
    segments: list[SegmentRef] = Field(default_factory=list)


class DeleteLedgerPayload(_Wire):
    """A request to delete one ledger's BookKeeper data or its offloaded copy."""

    topic_name: str
    ledger_component: LedgerComponent
    cursor_name: str | None = None
    schema_id: str | None = None
    ledger_type: LedgerType
    ledger_id: LedgerId
    offload_context: OffloadContextRef | None = None

    @field_validator("topic_name")
    @classmethod
    def _topic(cls, value: str) -> str:
        try:
            topic = parse_topic(value)
        except (FormatError, ValueError) as e:
            raise ValueError(f"not a persistent topic name: {e}") from e
        return str(topic)

    @model_validator(mode="after")
    def _consistent(self) -> DeleteLedgerPayload:
        if self.ledger_component == LedgerComponent.MANAGED_CURSOR and not self.cursor_name:
            raise ValueError("cursorName is required for MANAGED_CURSOR")
        if self.ledger_component == LedgerComponent.SCHEMA_STORAGE and not self.schema_id:
            raise ValueError("schemaId is required for SCHEMA_STORAGE")
        if self.ledger_type == LedgerType.OFFLOAD_LEDGER and self.offload_context is None:
            raise ValueError("offloadContext is required for OFFLOAD_LEDGER")
        return self

    def key(self) -> tuple[str, int]:
        """What identifies the data this request deletes (for de-duplication in a batch)."""
        return (self.ledger_type.value, self.ledger_id)

    def describe(self) -> str:
        extra = {LedgerComponent.MANAGED_CURSOR: f" cursor {self.cursor_name}",
                 LedgerComponent.SCHEMA_STORAGE: f" schema {self.schema_id}"}.get(self.ledger_component, "")
        return f"{self.ledger_type.value} {self.ledger_id} of {self.topic_name}{extra}"


class PendingDeleteLedgerInfo(DeleteLedgerPayload):
    """What goes through the system topic: the payload plus when and why it was marked."""

    marked_at: Annotated[int, Field(ge=0, strict=True), BeforeValidator(_integral)]
    reason: Reason

    def to_json(self) -> bytes:
        return encode(self)


def encode(request: DeleteLedgerPayload) -> bytes:
    """Stable UTF-8 JSON: declaration order, camelCase, nulls kept (readers may rely on the keys)."""
    return json.dumps(request.model_dump(mode="json", by_alias=True), separators=(",", ":")).encode()


def decode(data: bytes) -> PendingDeleteLedgerInfo:
    return _parse(PendingDeleteLedgerInfo, data)


def decode_payload(data: bytes | str | dict[str, Any]) -> DeleteLedgerPayload:
    return _parse(DeleteLedgerPayload, data)


def _parse(model: type[DeleteLedgerPayload], data: bytes | str | dict[str, Any]) -> Any:
    if isinstance(data, bytes | bytearray):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise InvalidRequest(f"payload is not UTF-8 (byte {e.start})") from e
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as e:
            raise InvalidRequest(f"payload is not JSON: {e.msg} at line {e.lineno} column {e.colno}") from e
    if not isinstance(data, dict):
        raise InvalidRequest(f"payload must be a JSON object, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise InvalidRequest(_summarise(e)) from e


def _summarise(error: ValidationError) -> str:
    parts = []
    for err in error.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "payload"
        parts.append(f"{where}: {err['msg']}")
    more = f" (+{error.error_count() - 5} more)" if error.error_count() > 5 else ""
    return "; ".join(parts) + more
