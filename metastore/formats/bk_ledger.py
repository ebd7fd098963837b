"""BookKeeper ledger metadata: the ledger znode's bytes, as a dataclass.

The znode *is* the ledger (deleting it is what ``BookKeeper.deleteLedger``
does), and its custom metadata says who owns the ledger -- so we must read
what BookKeeper writes, and refuse what we cannot read rather than guess:

* format 3 (BookKeeper >= 4.9): ``"BookieMetadataFormatVersion\\t3\\n"``, a
  varint32 length, then a binary ``LedgerMetadataFormat``;
* format 2: the same header line with ``2``, then the message in protobuf text format;
* format 1 (pre-protobuf text) and anything else: :class:`FormatError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf import text_format

from .errors import FormatError
from .generated import bookkeeper_pb2 as pb
from .protobuf_codec import missing_fields, opt, parse, read_varint, serialize, set_opt, write_varint

_WHAT = "BookKeeper ledger metadata"
_HEADER_PREFIX = b"BookieMetadataFormatVersion\t"
_HEADERS = {3: _HEADER_PREFIX + b"3\n", 2: _HEADER_PREFIX + b"2\n"}
_MAX_HEADER_LINE = 64

_Pb = pb.LedgerMetadataFormat
STATES = ("OPEN", "IN_RECOVERY", "CLOSED")
DIGEST_TYPES = ("CRC32", "HMAC", "CRC32C", "DUMMY")
#: Enum numbers to names, looked up once (``EnumTypeWrapper.Name`` per field was a tenth of decoding).
_STATE_NAMES = {v.number: v.name for v in _Pb.State.DESCRIPTOR.values}
_DIGEST_NAMES = {v.number: v.name for v in _Pb.DigestType.DESCRIPTOR.values}


@dataclass
class Segment:
    """Bookies (``host:port``) holding entries from ``first_entry_id`` on."""

    first_entry_id: int
    ensemble: list[str] = field(default_factory=list)


@dataclass
class LedgerMetadata:
    """One ledger's metadata.  ``ctime`` is ``None`` when the node does not record it."""

    quorum_size: int  # write quorum
    ensemble_size: int
    ack_quorum_size: int  # BookKeeper falls back to the write quorum when absent; so do we
    state: str = "OPEN"
    length: int = 0
    last_entry_id: int = -1
    segments: list[Segment] = field(default_factory=list)
    digest_type: str | None = None
    password: bytes = b""
    ctime: int | None = None
    custom_metadata: dict[str, bytes] = field(default_factory=dict)
    c_token: int | None = None
    format_version: int = 3
    #: :attr:`custom_texts`, once decoded (not ``functools.cached_property``: it takes a lock per first read)
    _texts: dict[str, str] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def custom_texts(self) -> dict[str, str]:
        """Every custom-metadata value as text (Pulsar stores UTF-8), decoded once: the delete phase
        reads a request's several times.  Decoded metadata is read, never changed in place."""
        texts = self._texts
        if texts is None:
            texts = self._texts = {k: v.decode("utf-8", errors="replace") for k, v in self.custom_metadata.items()}
        return texts

    def custom_text(self, key: str) -> str | None:
        """A custom-metadata value as text, or ``None``."""
        return self.custom_texts.get(key)

    def ctime_or(self, znode_ctime_ms: int) -> int:
        """The ledger's creation time: recorded ``ctime``, else the znode's ctime."""
        return self.ctime if self.ctime is not None else znode_ctime_ms


def _from_pb(msg: pb.LedgerMetadataFormat, version: int) -> LedgerMetadata:
    ack = opt(msg, "ackQuorumSize")
    digest = opt(msg, "digestType")
    last_entry = opt(msg, "lastEntryId")
    return LedgerMetadata(
        format_version=version,
        state=_STATE_NAMES.get(msg.state) or _Pb.State.Name(msg.state),
        quorum_size=msg.quorumSize,
        ensemble_size=msg.ensembleSize,
        ack_quorum_size=ack if ack is not None else msg.quorumSize,
        length=msg.length,
        last_entry_id=last_entry if last_entry is not None else -1,
        segments=[Segment(s.firstEntryId, list(s.ensembleMember)) for s in msg.segment],
        digest_type=(_DIGEST_NAMES.get(digest) or _Pb.DigestType.Name(digest)) if digest is not None else None,
        password=msg.password,
        ctime=opt(msg, "ctime"),
        custom_metadata={e.key: e.value for e in msg.customMetadata},
        c_token=opt(msg, "cToken"),
    )


def _to_pb(meta: LedgerMetadata) -> pb.LedgerMetadataFormat:
    if meta.state not in STATES:
        raise FormatError(f"{_WHAT}: unknown state {meta.state!r} (expected one of {STATES})")
    if meta.digest_type is not None and meta.digest_type not in DIGEST_TYPES:
        raise FormatError(f"{_WHAT}: unknown digest type {meta.digest_type!r}")
    msg = _Pb(
        quorumSize=meta.quorum_size,
        ensembleSize=meta.ensemble_size,
        length=meta.length,
        lastEntryId=meta.last_entry_id,
        state=meta.state,  # enums by name: the constructor takes them (checked against STATES above)
        ackQuorumSize=meta.ack_quorum_size,
        password=meta.password,
        digestType=meta.digest_type,  # None leaves it absent
    )
    for seg in meta.segments:
        msg.segment.add(firstEntryId=seg.first_entry_id, ensembleMember=seg.ensemble)
    set_opt(msg, "ctime", meta.ctime)
    for key, value in meta.custom_metadata.items():
        msg.customMetadata.add(key=key, value=value)
    set_opt(msg, "cToken", meta.c_token)
    return msg


def _header_version(data: bytes) -> int:
    """The format version from the first line, or a FormatError saying what is wrong."""
    if not data.startswith(_HEADER_PREFIX):
        raise FormatError(f"{_WHAT}: missing 'BookieMetadataFormatVersion' header (starts {data[:32]!r})")
    end = data.find(b"\n", len(_HEADER_PREFIX), len(_HEADER_PREFIX) + _MAX_HEADER_LINE)
    if end < 0:
        raise FormatError(f"{_WHAT}: truncated or overlong format-version line")
    raw = data[len(_HEADER_PREFIX) : end]
    if not raw.isdigit():
        raise FormatError(f"{_WHAT}: format version {raw!r} is not a number")
    version = int(raw)
    if version not in _HEADERS:
        raise FormatError(
            f"{_WHAT}: format version {version} is not supported (only 2 and 3; "
            "version 1 predates protobuf metadata)"
        )
    return version


def decode_ledger_metadata(data: bytes) -> LedgerMetadata:
    """Decode a ledger znode's bytes (format 3 binary or format 2 text)."""
    version = _header_version(data)
    body = data[len(_HEADERS[version]) :]
    if version == 2:
        msg = _Pb()
        try:
            text_format.Parse(body.decode("utf-8"), msg)
        except (text_format.ParseError, UnicodeDecodeError) as exc:
            raise FormatError(f"{_WHAT}: format 2 text does not parse ({exc})") from exc
        if not msg.IsInitialized():
            raise FormatError(f"{_WHAT}: format 2 text lacks required field(s) {missing_fields(msg)}")
        return _from_pb(msg, 2)
    length, start = read_varint(body, 0, f"{_WHAT} length prefix")
    if length > len(body) - start:
        raise FormatError(f"{_WHAT}: length prefix {length} runs past the end ({len(body) - start} bytes)")
    if length < len(body) - start:
        raise FormatError(f"{_WHAT}: {len(body) - start - length} unexpected bytes after the message")
    return _from_pb(parse(_Pb, body[start:], _WHAT), 3)


def decode_ledger_metadata_message(payload: bytes) -> LedgerMetadata:
    """The bare ``LedgerMetadataFormat`` message (no header, no length prefix), as Pulsar's
    offloaders embed the source ledger's metadata in their index objects."""
    return _from_pb(parse(_Pb, payload, _WHAT), 3)


def encode_ledger_metadata_message(meta: LedgerMetadata) -> bytes:
    """The bare message, for building offload-index fixtures."""
    return serialize(_to_pb(meta), _WHAT)


def encode_ledger_metadata(meta: LedgerMetadata) -> bytes:
    """Encode as ``meta.format_version`` (3: binary, 2: text) -- tests and demos create ledgers."""
    msg = _to_pb(meta)
    if meta.format_version == 3:
        payload = serialize(msg, _WHAT)
        return _HEADERS[3] + write_varint(len(payload)) + payload
    if meta.format_version == 2:
        serialize(msg, _WHAT)  # refuses missing required fields, like the binary path
        return _HEADERS[2] + text_format.MessageToString(msg).encode("utf-8")
    raise FormatError(f"{_WHAT}: cannot encode format version {meta.format_version} (only 2 and 3)")
