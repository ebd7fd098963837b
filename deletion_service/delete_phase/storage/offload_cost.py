"""What one offload request may cost in storage calls: the parts it names, and the bound on them.

An offloaded copy is made of parts, each checked in storage on its own: the per-ledger objects
(``<uuid>-ledger-<id>`` and its index) and each streaming segment (``<uuid>`` and its index).
Checking a part costs one listing on S3 when it is absent (``Offloader.stat_objects``), a few
calls when it is present (the index read, then the delete).  So a request's storage cost is its
number of parts, and a request's parts are whatever its message says: a producer on a request
topic can name a thousand segments that never existed, each one a call to the object store the
whole cluster shares.  The bound keeps that cost to what a genuine request can need.

**What a genuine request names.**  Upstream Pulsar writes ``OffloadContext.offloadSegment`` only
for streaming offload (PIP-76), where a segment rolls over after
``maxOffloadSegmentRolloverTimeInSeconds`` (600 s by default) or ``maxOffloadSegmentSizeInBytes``
(1 GiB), and a ledger after ``managedLedgerMaxLedgerRolloverTimeMinutes`` (240) or
``managedLedgerMaxSizePerLedgerMbytes`` (2,048): at the defaults a ledger spans at most 25
segments (240 min / 10 min, plus one at the edge).  Today no released managed ledger writes a
segment at all (the offloader half of streaming offload was merged, the managed-ledger half was
not), and this tool's own mark phase (``trim``, the leak watcher, ``scan-orphans --enqueue``)
sends one request per part.  So a genuine request names one part, or a whole context from a
PIP-186 broker: at most a few dozen segments.  :data:`MAX_PARTS_CHECKED` is 65 (64 segments and
the per-ledger part), more than twice the defaults' worst case, about a sixteenth of the 1,024 segments
the request format accepts.

**Beyond the bound.**  A request naming more parts is never checked in storage: it is invalid
(parked in the DLQ with :func:`beyond_bound`'s reason, never deleted, never lost).  An operator who
finds a genuine one there sends its parts as requests of their own (one segment each, as trim does).
"""

from __future__ import annotations

from deletion_service.protocol.request import PendingDeleteLedgerInfo

#: Parts (per-ledger objects, streaming segments) one request may name and still be checked in storage.
MAX_PARTS_CHECKED = 65


def parts(request: PendingDeleteLedgerInfo) -> int:
    """The parts an offload request names, each checked in storage on its own (at least 1: a LEDGER
    request, or a context naming none, costs one turn's check all the same)."""
    ctx = request.offload_context
    if ctx is None:
        return 1
    whole = bool(ctx.uid_msb or ctx.uid_lsb) or not ctx.segments
    return max(1, len(ctx.segments) + int(whole))


def beyond_bound(request: PendingDeleteLedgerInfo) -> str | None:
    """Why the request's parts are too many to check in storage (None: within the bound)."""
    count = parts(request)
    if count <= MAX_PARTS_CHECKED:
        return None
    return (f"its offload context names {count} parts (streaming segments and per-ledger objects), more "
            f"than the {MAX_PARTS_CHECKED} one request may name (a genuine context names a few dozen at most); "
            "nothing was read from tiered storage: if the copy is genuine, send one request per segment "
            "('enqueue --from-file', as trim does)")


def storage_cost(request: PendingDeleteLedgerInfo) -> int:
    """What checking the request costs in storage calls, in parts: its parts within the bound, 1 beyond
    it (refused before any call).  Never more than :data:`MAX_PARTS_CHECKED`: the offload lane's turns
    (``delete_phase/offload/turns.py``) give each namespace that many parts a turn."""
    count = parts(request)
    return count if count <= MAX_PARTS_CHECKED else 1
