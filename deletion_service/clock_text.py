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
