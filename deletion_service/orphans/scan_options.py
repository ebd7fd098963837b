"""The scan's options that the CLI needs before Spark is loaded (importing pyspark costs time)."""

from __future__ import annotations

import re

from deletion_service.errors import UsageError

DEFAULT_MASTER = "local[*]"
DEFAULT_MIN_AGE = "1d"

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}


def parse_duration(text: str) -> int:
    """``1d``, ``6h``, ``90m``, ``2w``, ``3600s`` or bare seconds → seconds."""
    match = re.fullmatch(r"\s*(\d+)\s*([smhdw]?)\s*", text or "")
    if not match:
        raise UsageError(f"--min-age expects a duration like 1d, 6h, 90m or 2w, got {text!r}")
    return int(match.group(1)) * _UNITS[match.group(2) or "s"]
