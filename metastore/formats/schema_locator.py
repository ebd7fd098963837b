"""SchemaLocator: the schema node ``/schemas/<tenant>/<ns>/<topic>``, as dataclasses.

Every schema version is an entry in a BookKeeper ledger; the locator's index
points at them.  Those ledgers are referenced (never orphans) while listed here,
which is why :meth:`SchemaLocator.ledger_ids` exists.  The node is plain
protobuf (Pulsar never compresses it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .generated import schema_pb2 as pb
from .position import Position
from .protobuf_codec import merge_unknown, parse, serialize, unknown_bytes

_WHAT = "schema locator node"


@dataclass
class IndexEntry:
    """One schema version and the (ledger, entry) holding it."""

    version: int
    position: Position
    hash: bytes = b""


@dataclass
class SchemaLocator:
    """``info`` is the latest version; ``index`` lists every version kept."""

    info: IndexEntry
    index: list[IndexEntry] = field(default_factory=list)
    unknown: bytes = b""

    def ledger_ids(self) -> list[int]:
        """Every ledger id the locator references (info and index), sorted, unique."""
        return sorted({self.info.position.ledger_id, *(e.position.ledger_id for e in self.index)})


def _entry_from_pb(msg: pb.IndexEntry) -> IndexEntry:
    return IndexEntry(msg.version, Position(msg.position.ledgerId, msg.position.entryId), msg.hash)


def _entry_to_pb(entry: IndexEntry, msg: pb.IndexEntry) -> None:
    msg.version = entry.version
    msg.position.ledgerId, msg.position.entryId = entry.position
    msg.hash = entry.hash


def decode_schema_locator(data: bytes) -> SchemaLocator:
    """Decode a schema locator node."""
    msg = parse(pb.SchemaLocator, data, _WHAT)
    return SchemaLocator(
        info=_entry_from_pb(msg.info),
        index=[_entry_from_pb(e) for e in msg.index],
        unknown=unknown_bytes(msg),
    )


def encode_schema_locator(locator: SchemaLocator) -> bytes:
    """Encode a schema locator node."""
    msg = pb.SchemaLocator()
    _entry_to_pb(locator.info, msg.info)
    for entry in locator.index:
        _entry_to_pb(entry, msg.index.add())
    merge_unknown(msg, locator.unknown)
    return serialize(msg, _WHAT)
