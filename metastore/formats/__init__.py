"""Pulsar and BookKeeper metadata formats and paths, in one place.

Everything that knows a byte layout or a znode path lives here, as pure
functions over bytes and dataclasses (no I/O except the two scanners that take
a store).  Protocol code uses these dataclasses, never the generated protobuf
classes, so the wire details (presence, unknown fields, compression envelope,
bitset word order) are decided once.

Modules: :mod:`.compression` (the 0x4778 envelope), :mod:`.managed_ledger`,
:mod:`.cursor_info`, :mod:`.schema_locator`, :mod:`.bk_ledger`,
:mod:`.ledger_paths` (BookKeeper layouts), :mod:`.pulsar_paths`.
Every decoding failure is a :class:`FormatError` (a ``ValueError``).
"""

from .bk_ledger import LedgerMetadata, Segment, decode_ledger_metadata, encode_ledger_metadata
from .compression import CompressionType
from .cursor_info import (
    BatchDeletionIndex,
    ManagedCursorInfo,
    MessageRange,
    decode_cursor,
    encode_cursor,
)
from .errors import FormatError
from .ledger_paths import (
    LedgerLayout,
    iter_ledger_ids,
    ledger_id_from_path,
    ledger_path,
    parse_layout,
    read_layout,
)
from .managed_ledger import (
    LedgerInfo,
    ManagedLedgerInfo,
    OffloadContext,
    OffloadSegment,
    decode_managed_ledger,
    encode_managed_ledger,
)
from .position import Position
from .pulsar_paths import (
    TopicName,
    check_entity,
    cursor_path,
    is_utf8_text,
    managed_ledger_name,
    managed_ledger_path,
    namespace_ownership_prefix,
    parse_namespace,
    parse_topic,
    pulsar_cursor_name,
    schema_id,
    schema_path,
    subscription_name,
    topic_from_managed_ledger_name,
    topic_from_managed_ledger_path,
)
from .schema_locator import IndexEntry, SchemaLocator, decode_schema_locator, encode_schema_locator

__all__ = [
    "BatchDeletionIndex",
    "CompressionType",
    "FormatError",
    "IndexEntry",
    "LedgerInfo",
    "LedgerLayout",
    "LedgerMetadata",
    "ManagedCursorInfo",
    "ManagedLedgerInfo",
    "MessageRange",
    "OffloadContext",
    "OffloadSegment",
    "Position",
    "SchemaLocator",
    "Segment",
    "TopicName",
    "cursor_path",
    "decode_cursor",
    "decode_ledger_metadata",
    "decode_managed_ledger",
    "decode_schema_locator",
    "encode_cursor",
    "encode_ledger_metadata",
    "encode_managed_ledger",
    "encode_schema_locator",
    "iter_ledger_ids",
    "ledger_id_from_path",
    "ledger_path",
    "managed_ledger_name",
    "managed_ledger_path",
    "namespace_ownership_prefix",
    "parse_layout",
    "check_entity",
    "parse_namespace",
    "parse_topic",
    "pulsar_cursor_name",
    "read_layout",
    "is_utf8_text",
    "schema_id",
    "schema_path",
    "subscription_name",
    "topic_from_managed_ledger_name",
    "topic_from_managed_ledger_path",
]
