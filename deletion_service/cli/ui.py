"""Shared bits of terminal output."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn


def progress(enabled: bool) -> Progress:
    """A progress bar on stderr (stdout stays clean for --json), hidden when disabled."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    console=Console(stderr=True), disable=not enabled, transient=True)


def ids(values: Sequence[int | str], limit: int = 20) -> str:
    return ", ".join(map(str, values[:limit])) + (f" … (+{len(values) - limit})" if len(values) > limit else "")


def size(n: int) -> str:
    """Bytes for people: 1.5 GiB, 320 KiB, 12 B."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
