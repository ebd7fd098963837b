"""Shared bits of terminal output.

**Tables never shorten a value.**  An id, a topic or a time cut to ``persistent://…`` is
worse than none: it cannot be grepped, copied or typed back.  :func:`show_table` prints
a command's ``rich`` table in one of two ways:

* stdout is not a terminal (a pipe, a file, ``grep``), or ``--wide``: plain columns aligned
  with spaces, full values, one row per line, no borders or colours (as ``kubectl get``
  does), after the title on a line of its own;
* a terminal: the boxed table when it fits the terminal's width whole; else the plain
  columns too, which the terminal wraps (a boxed table narrowed to fit folds an id or a
  topic into a column of single letters, or cuts it with "…").

Commands build their ``Table`` as before and hand it here instead of ``Console().print``.

**A string is never markup.**  Cells, titles and lines carry what a tenant may have chosen (a
topic, a subscription, a reason, a DLQ copy's last error, a log line): read as rich markup, ``x[/]``
made ``status`` fail and ``[conceal]`` hid the rest of a line.  So strings print as they are
(:func:`show_table`, :func:`say`), and this tool's own colours are :func:`styled` ``Text``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime

from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

#: Between two plain columns (kubectl uses three).
GAP = "   "


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


def warn(message: str, as_json: bool = False) -> None:
    """One line on stderr that does not stop the command (stdout stays clean for --json); with
    ``--json`` a JSON object ``{"warning": "…"}``, as an error is ``{"error": "…", …}``."""
    line = json.dumps({"warning": message}, ensure_ascii=False) if as_json else f"warning: {message}"
    print(line, file=sys.stderr, flush=True)


def utc(ms: int, millis: bool = False) -> str:
    """Epoch milliseconds as an ISO time in UTC, ``2026-11-02T16:01:29Z`` (``.123Z`` with ``millis``):
    the same in every table, whatever the reader's time zone."""
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{ms % 1000:03d}" if millis else "") + "Z"


def styled(text: str, style: str) -> Text:
    """This tool's own colour on ``text`` (never markup parsed from a string)."""
    return Text(text, style=style)


def say(console: Console, line: str | Text) -> None:
    """One line as it is: never read as markup, never cut."""
    console.print(line, markup=False, highlight=False, soft_wrap=True)


def show_table(table: Table, wide: bool = False, console: Console | None = None) -> None:
    """Print ``table`` whole: boxed on a terminal when it fits the terminal's width, else (piped,
    ``wide``, or too wide to box) plain columns that the terminal may wrap but nothing cuts."""
    console = console or Console()
    if isinstance(table.title, str):
        table.title = Text(table.title)  # rich reads a title string as markup whatever print says
    if console.is_terminal and not wide and _natural_width(console, table) <= console.width:
        console.print(table, markup=False)
        return
    console.file.write(plain_table(table))
    console.file.flush()


def _natural_width(console: Console, table: Table) -> int:
    """How wide ``table`` is with no value folded or cut."""
    return Measurement.get(console, console.options.update(width=1_000_000, markup=False), table).maximum


def plain_table(table: Table) -> str:
    """The title on its own line, then the header (unless the table hides it) and the rows, each
    column as wide as its widest value, right-aligned where the table right-aligns."""
    columns = table.columns
    cells = [[_text(cell) for cell in column.cells] for column in columns]
    rows = [list(row) for row in zip(*cells, strict=True)] if cells else []
    if table.show_header:
        rows.insert(0, [_text(column.header) for column in columns])
    widths = [max((len(row[i]) for row in rows), default=0) for i in range(len(columns))]
    lines = [_text(table.title)] if table.title else []
    for row in rows:
        parts = [value.rjust(width) if column.justify == "right" else value.ljust(width)
                 for value, width, column in zip(row, widths, columns, strict=True)]
        lines.append(GAP.join(parts).rstrip())
    return "".join(line + "\n" for line in lines)


def _text(value: RenderableType | None) -> str:
    """A cell as plain text: styles dropped, on one line."""
    if value is None:
        return ""
    if isinstance(value, str):
        text = value
    elif isinstance(value, Text):
        text = value.plain
    else:
        text = str(value)
    return " ".join(text.split("\n"))

