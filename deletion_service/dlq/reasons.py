"""The reasons a request can be parked in the DLQ for: what ``dlq list --reason`` and the admin
API's ``?reason=`` accept.

A filter on a reason no request can carry matches nothing, and "0 parked" then reads as good
news; so an unknown reason is refused, naming the known ones (and the closest to what was typed).
The list is the DLQ verdicts' kinds (:class:`~deletion_service.delete_phase.rules.decision.Kind`) —
the kinds that only ever delay a request (not-yet, in-use-grace, transient, offload-lane-full) are never a DLQ
reason — ``failed``, an older daemon's word for a DLQ verdict without a kind, and :data:`UNSEALED`:
what a listing says of a parked message whose reason this tool did not seal (a producer's own words,
or a copy an older daemon parked), whose words it does not show.
"""

from __future__ import annotations

import difflib

from deletion_service.delete_phase.rules.decision import Kind
from deletion_service.delete_phase.rules.outward import UNKNOWN_DLQ_REASON

#: Kinds that delay a request (a reconsume) and never park it.
_NEVER_PARKED = frozenset({Kind.NONE, Kind.NOT_YET, Kind.IN_USE_GRACE, Kind.TRANSIENT, Kind.LANE_FULL})

#: The listed reason of a parked message that does not prove this tool parked it (see ``operations.entry``).
UNSEALED = "unsealed"

PARKED_REASONS: tuple[str, ...] = tuple(sorted({k.value for k in Kind if k not in _NEVER_PARKED}
                                               | {UNKNOWN_DLQ_REASON, UNSEALED}))


def unknown_reason(reason: str) -> str | None:
    """None for a reason a parked request can carry; else why it is refused, in one sentence."""
    if reason in PARKED_REASONS:
        return None
    close = difflib.get_close_matches(reason, PARKED_REASONS, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    return f"no request is ever parked for reason {reason!r}: {hint}known reasons: {', '.join(PARKED_REASONS)}"
