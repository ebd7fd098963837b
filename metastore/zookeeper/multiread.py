"""ZooKeeper's multi-read (``OpCode.multiRead`` = 22, ZooKeeper ≥ 3.6) as a kazoo request.

Why this exists: kazoo spends about 250 µs of client CPU per request, pipelined or
not, so reading 100k ledger znodes one ``getData`` each is CPU-bound (~90 s on two
cores).  A multi-read carries many ``getData`` ops in one request and one reply, so
the per-request cost is paid once per chunk instead of once per node.  kazoo has
no public API for it; this module is the wire format only (no I/O, no policy):
:class:`MultiRead` is handed to kazoo's request queue like its own request
objects (it has ``type``, ``serialize()`` and ``deserialize(buffer, offset)``).

The jute layout, all integers big-endian::

    request  := ( MultiHeader{type=4 (getData), done=false, err=-1}
                  GetDataRequest{path: ustring, watch: boolean} )*
                MultiHeader{type=-1, done=true, err=-1}
    reply    := ( MultiHeader{type, done=false, err}
                  ( GetDataResponse{data: buffer, stat: Stat}   when type = 4
                  | ErrorResponse{err: int}                     when type = -1 ) )*
                MultiHeader{type=-1, done=true, err=-1}

    MultiHeader := int type, boolean done (1 byte), int err
    ustring/buffer := int length (-1 for null), then the bytes
    Stat := czxid, mzxid, ctime, mtime: long; version, cversion, aversion: int;
            ephemeralOwner: long; dataLength, numChildren: int; pzxid: long

Unlike a write multi (``Transaction``), a multi-read is not atomic and each op
fails alone: a missing or unreadable node is an ``ErrorResponse`` in its slot and
the other slots still carry data.  The reply header's own error is set only when
the request as a whole fails — notably ``UNIMPLEMENTED`` (-6) from a server older
than 3.6, which kazoo raises as :class:`kazoo.exceptions.UnimplementedError`.

Paths here are the server's paths: the caller applies the client's chroot.

How big a chunk is (:class:`ChunkSizer`): a reply is the sum over its ops of
:data:`REPLY_BYTES_PER_OP` plus the node's data, and the data sizes are only known
once read.  So the sizer learns them: each chunk is as long as the reply budget
allows at the mean node size of the previous reply (at most :data:`MAX_OPS`),
growing at most :data:`GROWTH` times per reply from :data:`FIRST_OPS` — a store's
first reply stays inside the budget for nodes up to 16 kB even before anything
was learned.  The budget is half of ``jute.maxbuffer``, so a chunk whose nodes
average up to twice the previous reply's mean still fits a 1 MiB frame.  Nothing
can bound a chunk that meets much larger nodes than the last one did; the next
chunk then shrinks.  (ZooKeeper 3.8 was seen serving a 2.7 MB multi-read reply
and kazoo, which has no frame limit, reading it: an underestimate costs memory
for one reply, not the connection — but other servers and clients enforce
``jute.maxbuffer`` on replies, so the budget is kept.)
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, ClassVar, Final

from kazoo.exceptions import EXCEPTIONS, ZookeeperError
from kazoo.protocol.states import ZnodeStat

#: ``ZooDefs.OpCode.multiRead``.
MULTI_READ_TYPE: Final = 22
#: ``ZooDefs.OpCode.getData``, the op a :class:`MultiRead` carries.
GET_DATA_TYPE: Final = 4
#: ``ZooDefs.OpCode.getChildren``, the op a :class:`MultiListChildren` carries.
GET_CHILDREN_TYPE: Final = 8
#: ``ZooDefs.OpCode.error``: the op's slot holds an ``ErrorResponse``.
ERROR_TYPE: Final = -1

_HEADER = struct.Struct("!iBi")
_INT = struct.Struct("!i")
_STAT = struct.Struct("!qqqqiiiqiiq")
_END: Final = _HEADER.pack(-1, 1, -1)

#: Reply bytes one op costs besides its data: its MultiHeader, the data's length, the Stat.
REPLY_BYTES_PER_OP: Final = _HEADER.size + _INT.size + _STAT.size
#: Reply bytes besides the ops: the reply header (xid, zxid, err), the closing MultiHeader
#: and the frame's length prefix.
REPLY_BYTES_FIXED: Final = 16 + _HEADER.size + _INT.size

#: ZooKeeper's default ``jute.maxbuffer``: the largest frame a server or Java client accepts.
JUTE_MAXBUFFER: Final = 1_048_575
#: Ops per multi-read: enough to pay kazoo's per-request cost once per thousand nodes.
MAX_OPS: Final = 1000
#: Bytes one reply (and one request) is planned to: half the frame limit, see the module docstring.
REPLY_BUDGET: Final = JUTE_MAXBUFFER // 2
#: A store's first chunk, before any node size is known: 32 nodes of 16 kB fill the budget.
FIRST_OPS: Final = 32
#: How much longer one chunk may be than the one before (slow start after small or big nodes).
GROWTH: Final = 4

#: One op's outcome: the node's data and Stat, or the error ZooKeeper gave for that op alone.
ReadResult = tuple[bytes, ZnodeStat] | ZookeeperError
#: One listing's outcome: the children's names, or the error ZooKeeper gave for that op alone.
ListResult = list[str] | ZookeeperError
#: Listings one :class:`MultiListChildren` carries.  Children lists have no size to learn
#: from beforehand; the callers list managed ledgers, whose children are a few cursors.
MAX_LIST_OPS: Final = 200


class MultiReadError(Exception):
    """The reply does not follow the multi-read layout (a server or framing bug, never a node's fault)."""


class _MultiReadOps:
    """One multi-read request of ops of one kind (``op_type``), no watches; replies in request order.

    Subclasses say which op and how one reply slot of it reads (``_read_op``); framing,
    error slots and the checks on the reply's layout are shared."""

    type: Final = MULTI_READ_TYPE
    op_type: ClassVar[int]
    op_name: ClassVar[str]

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = tuple(paths)

    def __repr__(self) -> str:
        # kazoo logs every request it sends; a thousand paths would make that line useless
        first = self.paths[0] if self.paths else ""
        return f"{type(self).__name__}({len(self.paths)} {self.op_name} ops, first {first!r})"

    def serialize(self) -> bytes:
        """The request body (kazoo prefixes the length, xid and ``type``)."""
        header = _HEADER.pack(self.op_type, 0, -1)
        parts: list[bytes] = []
        for path in self.paths:
            raw = path.encode("utf-8")
            parts += (header, _INT.pack(len(raw)), raw, b"\x00")  # watch = false
        parts.append(_END)
        return b"".join(parts)

    def deserialize(self, buffer: bytes | bytearray | memoryview, offset: int) -> list[Any]:
        """One result per requested path, in request order.

        Called by kazoo's connection thread when the reply header carries no error.
        Anything off the layout (an op type we did not ask for, a truncated reply,
        a count that does not match the request) raises :class:`MultiReadError`, which kazoo hands to
        the waiting caller instead of a wrong answer.
        """
        results: list[Any] = []
        try:
            while True:
                op_type, done, _ = _HEADER.unpack_from(buffer, offset)
                offset += _HEADER.size
                if done:
                    break
                if op_type == self.op_type:
                    result, offset = self._read_op(buffer, offset)
                    results.append(result)
                elif op_type == ERROR_TYPE:
                    (code,) = _INT.unpack_from(buffer, offset)
                    offset += _INT.size
                    results.append(EXCEPTIONS[code]())
                else:
                    raise MultiReadError(f"multi-read reply op {len(results)} has type {op_type}, "
                                         f"expected {self.op_name} or error")
        except (struct.error, UnicodeDecodeError) as e:
            raise MultiReadError(f"multi-read reply truncated after {len(results)} results: {e}") from e
        if len(results) != len(self.paths):
            raise MultiReadError(f"multi-read reply has {len(results)} results for {len(self.paths)} paths")
        return results

    def _read_op(self, buffer: bytes | bytearray | memoryview, offset: int) -> tuple[Any, int]:
        raise NotImplementedError


class MultiRead(_MultiReadOps):
    """``getData`` ops: each slot a :data:`ReadResult`."""

    op_type: ClassVar[int] = GET_DATA_TYPE
    op_name: ClassVar[str] = "getData"

    def _read_op(self, buffer: bytes | bytearray | memoryview, offset: int) -> tuple[ReadResult, int]:
        (length,) = _INT.unpack_from(buffer, offset)
        offset += _INT.size
        data = b"" if length <= 0 else bytes(buffer[offset:offset + length])  # null data reads as b""
        offset += max(length, 0)
        stat = ZnodeStat._make(_STAT.unpack_from(buffer, offset))
        return (data, stat), offset + _STAT.size


def request_bytes(path: str) -> int:
    """The bytes one getData op adds to a multi-read request (an ASCII path is as long in UTF-8:
    no encoding needed for the common case)."""
    return _HEADER.size + _INT.size + (len(path) if path.isascii() else len(path.encode("utf-8"))) + 1


class ChunkSizer:
    """How many of the next paths one multi-read carries, learnt from the replies so far.

    One per store, shared by its threads: the counters are plain ints and a lost
    update between two threads only makes one chunk a little off, never wrong.
    """

    def __init__(self, max_ops: int = MAX_OPS, budget: int = REPLY_BUDGET, first_ops: int = FIRST_OPS) -> None:
        self.max_ops = max_ops
        self.budget = budget
        self.ops = min(first_ops, max_ops)

    def end_of_chunk(self, paths: Sequence[str], start: int) -> int:
        """The index after the last path of the chunk starting at ``start`` (at least one path)."""
        end = min(len(paths), start + self.ops)
        size = REPLY_BYTES_FIXED
        for i in range(start, end):
            size += request_bytes(paths[i])
            if size > self.budget and i > start:
                return i
        return end

    def observe(self, results: Sequence[ReadResult]) -> None:
        """Resize from a reply: the budget at its mean node size, growing by at most :data:`GROWTH`."""
        if not results:
            return
        data = sum(len(r[0]) for r in results if isinstance(r, tuple))
        mean = data / len(results)
        fits = int((self.budget - REPLY_BYTES_FIXED) // (REPLY_BYTES_PER_OP + mean))
        self.ops = max(1, min(self.max_ops, fits, self.ops * GROWTH))


def reply_bytes(data_lengths: Sequence[int]) -> int:
    """The wire size of a multi-read reply carrying nodes of these data lengths."""
    return REPLY_BYTES_FIXED + sum(REPLY_BYTES_PER_OP + n for n in data_lengths)


class MultiListChildren(_MultiReadOps):
    """``getChildren`` ops: each slot a :data:`ListResult` (a ``GetChildrenResponse{vector<ustring>}``).

    Why: the delete phase lists the cursors of every managed ledger in a batch;
    one ``getChildren`` each cost more than the rest of the batch's reads."""

    op_type: ClassVar[int] = GET_CHILDREN_TYPE
    op_name: ClassVar[str] = "getChildren"

    def _read_op(self, buffer: bytes | bytearray | memoryview, offset: int) -> tuple[ListResult, int]:
        return _read_strings(buffer, offset)


def _read_strings(buffer: bytes | bytearray | memoryview, offset: int) -> tuple[list[str], int]:
    """A jute ``vector<ustring>`` (count -1 is a null vector: no names)."""
    (count,) = _INT.unpack_from(buffer, offset)
    offset += _INT.size
    names = []
    for _ in range(max(count, 0)):
        (length,) = _INT.unpack_from(buffer, offset)
        offset += _INT.size
        if length < 0 or offset + length > len(buffer):
            raise MultiReadError(f"child name of {length} bytes at offset {offset} overruns the reply")
        names.append(bytes(buffer[offset:offset + length]).decode("utf-8"))
        offset += length
    return names, offset
