"""The deletion request on the wire: ``PendingDeleteLedgerInfo`` and ``DeleteLedgerPayload``.

Messages cross process and version boundaries (a broker-side producer, our
CLI, the admin API), so validation is strict about what the protocol needs and
lenient about the rest: unknown fields are ignored, field names are the
camelCase of the design, and the JSON we write is stable (fixed field order,
no whitespace) so the same request always serialises the same way.
"""

from __future__ import annotations

import functools
import json
import re
from enum import StrEnum
from typing import Annotated, Any, assert_never

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from deletion_service.protocol.claimed_words import is_name
from metastore.formats import FormatError, is_utf8_text, parse_topic, schema_id


def _integral(value: Any) -> Any:
    """JSON numbers like ``5.0`` are integers to JSON Schema and to Java's JSON libraries;
    accept them exactly (never ``5.5``, never strings, never huge floats that lost digits)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


#: C0 controls and DEL.  A regex, not a per-character loop: every request's topic passes here.
_CONTROL_CHARACTER = re.compile("[\x00-\x1f\x7f]")


def _text(value: Any) -> Any:
    """Every string of a request ends up in a metadata path, a log line or an object key:
    refuse what has no UTF-8 form (lone surrogates) or carries control characters."""
    if isinstance(value, str):
        if not is_utf8_text(value):
            raise ValueError("not valid Unicode text (lone surrogate)")
        if _CONTROL_CHARACTER.search(value):
            raise ValueError("contains control characters")
    return value


Text = Annotated[str, BeforeValidator(_text)]
#: A name that becomes one node of a metadata path (a cursor): '.' and '..' would name another node.
@functools.lru_cache(maxsize=16_384)
def _normalized_topic(value: str) -> str:
    """A topic name in its one spelling.  Memoized: a batch or a trim names few topics many
    times, and parsing one was a tenth of a request's CPU (a refusal raises, and is not cached)."""
    try:
        topic = parse_topic(value)
    except (FormatError, ValueError) as e:
        raise ValueError(f"not a persistent topic name: {e}") from e
    return str(topic)


def _node_name(value: str) -> str:
    if value in (".", ".."):
        raise ValueError(f"{value!r} is not a node name")
    return value


NodeName = Annotated[Text, Field(min_length=1, max_length=1024), AfterValidator(_node_name)]

Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1, strict=True), BeforeValidator(_integral)]
LedgerId = Annotated[int, Field(ge=0, le=2**63 - 1, strict=True), BeforeValidator(_integral)]


_REGION = re.compile(r"[a-z0-9][a-z0-9-]{0,62}", re.ASCII)


class LedgerComponent(StrEnum):
    MANAGED_LEDGER = "MANAGED_LEDGER"
    MANAGED_CURSOR = "MANAGED_CURSOR"
    SCHEMA_STORAGE = "SCHEMA_STORAGE"
    #: Ours (PIP-186 has none): a compacted topic's ledger; ``topicName`` is the compacted topic.
    COMPACTED_LEDGER = "COMPACTED_LEDGER"
    #: Ours: a delayed-delivery bucket's snapshot ledger (PIP-195); ``cursorName`` is its subscription.
    DELAYED_INDEX_BUCKET = "DELAYED_INDEX_BUCKET"


#: Components whose ledger belongs to one cursor (``cursorName`` required, and allowed only there).
CURSOR_COMPONENTS = frozenset({LedgerComponent.MANAGED_CURSOR, LedgerComponent.DELAYED_INDEX_BUCKET})


class LedgerType(StrEnum):
    LEDGER = "LEDGER"
    OFFLOAD_LEDGER = "OFFLOAD_LEDGER"


class Reason(StrEnum):
    TRIM = "trim"
    ORPHAN = "orphan"
    MANUAL = "manual"
    TOPIC_DELETED = "topic-deleted"
    #: Ours: the leak watcher saw the ledger leave every reference and still exist after a settle delay
    #: (a broker's one-phase delete that failed).  A claim like any other: it buys no check less.
    LEAKED = "leaked"


class InvalidRequest(ValueError):
    """The payload cannot be a deletion request; the message says which field and why."""


class _Wire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)


def _check_location(value: dict[str, str]) -> dict[str, str]:
    """Bucket, region and endpoint name where deletes go: a value that can never address
    storage (whitespace in an endpoint, a bucket with a slash) is invalid, not a retry."""
    for key in ("serviceEndpoint", "endpoint", "bucket", "region"):
        text = value.get(key, "")
        if any(c.isspace() for c in text):
            raise ValueError(f"{key} {text!r} contains whitespace")
    if "/" in value.get("bucket", ""):
        raise ValueError(f"bucket {value['bucket']!r} contains '/'")
    region = value.get("region", "")
    if region and not _REGION.fullmatch(region):
        raise ValueError(f"region {region!r} is not a storage region name (letters, digits, '-')")
    return value


DriverName = Annotated[Text, Field(min_length=1, max_length=64)]
DriverMetadata = Annotated[dict[Text, Annotated[Text, Field(max_length=2048)]], AfterValidator(_check_location)]

#: Segments one request may name: every one costs a HEAD and an index read, so one request must
#: not be able to keep the offload lane busy for minutes (trim sends one request per segment).
MAX_SEGMENTS = 1024


class SegmentRef(_Wire):
    """One streaming-offload segment, and optionally where it was written.

    ``driverName``/``driverMetadata`` are the segment's own recorded location
    (``OffloadSegment.driverMetadata``), which may differ from the context's: a
    segment written after the cluster's offload settings changed.  Absent, the
    segment lives where the context says.  Decoded as strictly as the context's
    own, and checked against the same allow-list; an older reader ignores them,
    which is why trim sends each segment in its own request whose context-level
    location is the segment's (``mark_phase/pick.py``)."""

    uid_msb: Int64
    uid_lsb: Int64
    driver_name: DriverName | None = None
    driver_metadata: DriverMetadata | None = None

    @model_validator(mode="after")
    def _whole_location(self) -> SegmentRef:
        """A location is a driver and its metadata: metadata without a driver would be read with
        the context's driver, which is a guess, and a guess decides where "absent" is looked for."""
        if self.driver_metadata is not None and self.driver_name is None:
            raise ValueError("a segment's driverMetadata needs its driverName")
        return self


class OffloadContextRef(_Wire):
    """Where the offloaded copy lives: enough to name and delete its objects."""

    uid_msb: Int64
    uid_lsb: Int64
    driver_name: DriverName
    driver_metadata: DriverMetadata = Field(default_factory=dict)
    segments: list[SegmentRef] = Field(default_factory=list, max_length=MAX_SEGMENTS)


class DeleteLedgerPayload(_Wire):
    """A request to delete one ledger's BookKeeper data or its offloaded copy."""

    topic_name: Text
    ledger_component: LedgerComponent
    cursor_name: NodeName | None = None
    schema_id: Text | None = None
    ledger_type: LedgerType
    ledger_id: LedgerId
    offload_context: OffloadContextRef | None = None

    @field_validator("topic_name")
    @classmethod
    def _topic(cls, value: str) -> str:
        return _normalized_topic(value)

    @model_validator(mode="after")
    def _consistent(self) -> DeleteLedgerPayload:
        """A request is one claim about one ledger: fields that say different things are
        invalid, never resolved by picking one (a forged schemaId must not ride on an
        unrelated topicName past the reference check)."""
        component, ledger_type = self.ledger_component, self.ledger_type
        if component in CURSOR_COMPONENTS and not self.cursor_name:
            raise ValueError(f"cursorName is required for {component.value}")
        if component not in CURSOR_COMPONENTS and self.cursor_name:
            raise ValueError(f"cursorName is only for MANAGED_CURSOR and DELAYED_INDEX_BUCKET, not {component.value}")
        if component == LedgerComponent.SCHEMA_STORAGE:
            if not self.schema_id:
                raise ValueError("schemaId is required for SCHEMA_STORAGE")
            expected = schema_id(self.topic_name)
            if self.schema_id != expected:
                raise ValueError(f"schemaId {self.schema_id!r} is not the schema of {self.topic_name} "
                                 f"({expected!r})")
        elif self.schema_id:
            raise ValueError(f"schemaId is only for SCHEMA_STORAGE, not {component.value}")
        if ledger_type == LedgerType.OFFLOAD_LEDGER:
            if self.offload_context is None:
                raise ValueError("offloadContext is required for OFFLOAD_LEDGER")
            if component != LedgerComponent.MANAGED_LEDGER:
                raise ValueError(f"only MANAGED_LEDGER ledgers are offloaded, not {component.value}")
        elif self.offload_context is not None:
            raise ValueError("offloadContext is only for OFFLOAD_LEDGER")
        return self

    def key(self) -> tuple[str, int]:
        """What identifies the data this request deletes (for de-duplication in a batch)."""
        return (self.ledger_type.value, self.ledger_id)

    def describe(self) -> str:
        return f"{self.ledger_type.value} {self.ledger_id} of {self.topic_name}{self._component_detail()}"

    def _component_detail(self) -> str:
        match self.ledger_component:
            case LedgerComponent.MANAGED_LEDGER:
                return ""
            case LedgerComponent.MANAGED_CURSOR:
                return f" cursor {self.cursor_name}"
            case LedgerComponent.SCHEMA_STORAGE:
                return f" schema {self.schema_id}"
            case LedgerComponent.COMPACTED_LEDGER:
                return " (compacted ledger)"
            case LedgerComponent.DELAYED_INDEX_BUCKET:
                return f" delayed-delivery bucket of {self.cursor_name}"
            case _:
                assert_never(self.ledger_component)


class PendingDeleteLedgerInfo(DeleteLedgerPayload):
    """What goes through the system topic: the payload plus when and why it was marked."""

    marked_at: Annotated[int, Field(ge=0, strict=True), BeforeValidator(_integral)]
    reason: Reason

    def to_json(self) -> bytes:
        return encode(self)

    def strings(self) -> list[str]:
        """Every value of its own a reason about it may quote (``claimed_words``): a few attribute reads."""
        out = [s for s in (self.topic_name, self.cursor_name, self.schema_id) if s is not None]
        context = self.offload_context
        if context is not None:
            out += [context.driver_name, *context.driver_metadata.keys(), *context.driver_metadata.values()]
            for segment in context.segments:
                metadata = segment.driver_metadata or {}
                out += [*([segment.driver_name] if segment.driver_name else []), *metadata.keys(), *metadata.values()]
        return out

    def wire(self) -> dict[str, Any]:
        """``model_dump(mode="json", by_alias=True)``: the same keys in the same order with the same
        values, built directly for a request without an offload context.  The audit trail writes one
        per deletion, and pydantic's serializer cost as much as the rest of the record."""
        if self.offload_context is not None or type(self) is not PendingDeleteLedgerInfo:
            return self.model_dump(mode="json", by_alias=True)
        # str() of a StrEnum is its value (the enums' ``.value`` is a slower descriptor lookup)
        return {"topicName": self.topic_name, "ledgerComponent": str(self.ledger_component),
                "cursorName": self.cursor_name, "schemaId": self.schema_id, "ledgerType": str(self.ledger_type),
                "ledgerId": self.ledger_id, "offloadContext": None, "markedAt": self.marked_at,
                "reason": str(self.reason)}


def encode(request: DeleteLedgerPayload) -> bytes:
    """Stable UTF-8 JSON: declaration order, camelCase, nulls kept (readers may rely on the keys)."""
    return json.dumps(request.model_dump(mode="json", by_alias=True), separators=(",", ":")).encode()


def decode(data: bytes) -> PendingDeleteLedgerInfo:
    return _parse(PendingDeleteLedgerInfo, data)


def decode_payload(data: bytes | str | dict[str, Any]) -> DeleteLedgerPayload:
    return _parse(DeleteLedgerPayload, data)


#: No request is anywhere near this; a bigger payload is refused before it is parsed.
MAX_PAYLOAD_BYTES = 1024 * 1024


def _parse(model: type[DeleteLedgerPayload], data: bytes | str | dict[str, Any]) -> Any:
    """Every way a payload can fail becomes :class:`InvalidRequest` for *that* payload.

    Decoding runs on attacker-controlled bytes, so it must not raise anything
    else: deep nesting is a ``RecursionError`` in ``json``, a 5,000-digit number a
    ``ValueError`` (Python's integer-string limit), and a validator may meet types
    it never expected.  One bad message must never fail its batch."""
    try:
        return _parse_unguarded(model, data)
    except InvalidRequest:
        raise
    except RecursionError as e:
        raise InvalidRequest("payload is nested too deeply") from e
    except Exception as e:  # noqa: BLE001 - see the docstring: decoding never escapes with another error
        raise InvalidRequest(f"payload cannot be decoded: {type(e).__name__}: {str(e)[:200]}") from e


def _parse_unguarded(model: type[DeleteLedgerPayload], data: bytes | str | dict[str, Any]) -> Any:
    if isinstance(data, bytes | bytearray) and len(data) > MAX_PAYLOAD_BYTES:
        raise InvalidRequest(f"payload of {len(data)} bytes exceeds {MAX_PAYLOAD_BYTES}")
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
        except ValueError as e:  # e.g. an integer beyond Python's digit limit
            raise InvalidRequest(f"payload is not acceptable JSON: {str(e)[:200]}") from e
    if not isinstance(data, dict):
        raise InvalidRequest(f"payload must be a JSON object, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise InvalidRequest(_summarise(e)) from e


def _summarise(error: ValidationError) -> str:
    parts = []
    for err in error.errors()[:5]:  # a key that is no name is quoted, so our words can tell it apart (claimed_words)
        where = ".".join(str(p) if is_name(str(p)) else repr(p) for p in err["loc"]) or "payload"
        parts.append(f"{where}: {err['msg']}")
    more = f" (+{error.error_count() - 5} more)" if error.error_count() > 5 else ""
    return "; ".join(parts) + more
