"""Sizes and durations for people, as the report, its charts and the CLI say them."""

from __future__ import annotations

UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(n: int) -> str:
    """Binary units (``1.5 GiB``): what BookKeeper's and S3's own tools print."""
    value = float(n)
    for unit in UNITS:
        if abs(value) < 1024 or unit == "PiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human_duration(seconds: int) -> str:
    """``45 s``, ``12 min``, ``6 h``, ``7 d``, ``2.5 d``: the unit an operator would say."""
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}".removesuffix(".0") + " h"
    return f"{seconds / 86400:.1f}".removesuffix(".0") + " d"
