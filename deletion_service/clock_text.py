"""A moment in a log line or a table, as an operator reads it: the time alone only when it is today.

"held until 16:01:29" for a hold that ends tomorrow reads as "in a few hours";
a time on another day carries its date.  Local time, as the rest of the text
log; JSON logs and the admin API carry ISO UTC instead.
"""

from __future__ import annotations

import time


def local_moment(seconds: float, now: float | None = None) -> str:
    """``16:01:29`` today, ``2026-11-26 16:01:29`` on any other day (local time)."""
    at = time.localtime(seconds)
    today = time.localtime(time.time() if now is None else now)
    if (at.tm_year, at.tm_yday) == (today.tm_year, today.tm_yday):
        return time.strftime("%H:%M:%S", at)
    return time.strftime("%Y-%m-%d %H:%M:%S", at)


def rfc3339(ms: int) -> str:
    """Epoch milliseconds as RFC 3339 in UTC with milliseconds, ``2026-11-26T15:01:29.123Z``: the one
    format of a moment in the CLI's ``--json`` output (fields the CLI contract fixes otherwise, the audit
    record's ``at`` and a request's ``markedAt``, keep epoch milliseconds)."""
    seconds, millis = divmod(int(ms), 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"
