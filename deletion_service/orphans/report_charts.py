"""The report's charts, drawn by matplotlib's non-GUI Agg canvas into PNGs (``data:`` URIs).

What a reader must be able to trust at a glance, each learnt from a report looked at in a browser:

* every bar carries its value (one tenant is otherwise one solid block with no number on it);
* counts have integer ticks (there is no half of an orphan);
* the two panels of a chart keep a gap, so the bytes panel's last tick label never runs into
  the counts panel's first;
* the tenant and namespace charts share one label column width, so their plots line up and
  have the same width however long the namespace names are;
* the legend names only the storage that has bars, and an empty age bin has no "0 B" label.

Chart labels are drawn into pixels, with ``$`` escaped so matplotlib does not read a name as mathtext.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator, MultipleLocator

from deletion_service.orphans.summary import AgeBucket, NamespaceTotals
from deletion_service.orphans.units import UNITS, human_bytes

#: Bars per chart before the rest are summed into "other": more bars stop being readable.
TOP_GROUPS = 20
#: Chart labels longer than this are cut with "…" (the tables below the charts carry full names).
LABEL_CHARS = 42

BK_COLOUR, TIERED_COLOUR = "#0072B2", "#E69F00"  # Okabe-Ito: distinguishable with colour-blindness
DPI = 120
WIDTH_IN = 10.0
#: Room past the longest bar for its value label, as a share of the axis.
_HEADROOM = 1.22
_TICK_FONT = 10.0  # matplotlib's default tick label size, in points
_GAP_IN = 0.7  # between the two panels of a group chart


@dataclass(frozen=True)
class Group:
    """One bar: a tenant, a namespace, or "other" (the sum of those past the top ones)."""

    name: str
    ledgers: int
    ledger_bytes: int
    objects: int
    object_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.ledger_bytes + self.object_bytes


def groups(rows: Iterable[NamespaceTotals], key: Callable[[NamespaceTotals], str]) -> list[Group]:
    """Totals per ``key``, biggest first; past ``TOP_GROUPS`` the rest become one "other" bar."""
    totals: dict[str, list[int]] = {}
    for row in rows:
        t = totals.setdefault(key(row), [0, 0, 0, 0])
        t[0] += row.orphan_ledgers
        t[1] += row.orphan_ledger_bytes
        t[2] += row.orphan_objects
        t[3] += row.orphan_object_bytes
    ordered = sorted((Group(name, *t) for name, t in totals.items()),
                     key=lambda g: (-g.total_bytes, -(g.ledgers + g.objects), g.name))
    if len(ordered) <= TOP_GROUPS + 1:  # "other (1)" would hide a name for no gain
        return ordered
    rest = ordered[TOP_GROUPS:]
    other = Group(f"other ({len(rest)})", sum(g.ledgers for g in rest), sum(g.ledger_bytes for g in rest),
                  sum(g.objects for g in rest), sum(g.object_bytes for g in rest))
    return ordered[:TOP_GROUPS] + [other]


def label(name: str) -> str:
    """A chart label: cut to ``LABEL_CHARS``, ``$`` escaped (matplotlib reads ``$…$`` as math)."""
    short = name if len(name) <= LABEL_CHARS else name[: LABEL_CHARS - 1] + "…"
    return short.replace("$", r"\$")


def png_data_uri(fig: Figure) -> str:
    """Render with the Agg canvas (no GUI, no global pyplot state) and embed as a ``data:`` URI."""
    buffer = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buffer, metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def label_width_in(names: Iterable[str]) -> float:
    """The width, in inches, of the widest tick label among ``names`` (measured by Agg itself)."""
    fig = Figure(dpi=DPI)
    renderer = FigureCanvasAgg(fig).get_renderer()
    widths = [fig.text(0, 0, label(n), fontsize=_TICK_FONT).get_window_extent(renderer).width for n in names]
    return max(widths, default=0.0) / DPI


def _bytes_axis(ax: Axes, largest: int) -> None:
    """Ticks at round numbers of one binary unit (10 GiB, 20 GiB…), at most five, never 9.3 GiB steps."""
    power = min(len(UNITS) - 1, int(math.log(largest, 1024))) if largest >= 1 else 0
    unit = 1024**power
    steps = (0.25, 0.5, 1, 2, 2.5, 5, 10, 20, 25, 50, 100, 200, 250, 500) if power else (1, 2, 5, 10, 20, 50, 100)
    step = next((s for s in steps if largest * _HEADROOM / unit / s <= 5), 1000)
    ax.xaxis.set_major_locator(MultipleLocator(step * unit))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x / unit:g} {UNITS[power]}"))
    ax.set_xlim(0, max(largest, 1) * _HEADROOM)


def _count_axis(axis: object) -> None:
    """Whole numbers only: there is no half of an orphan."""
    axis.set_major_locator(MaxNLocator(nbins=5, integer=True))  # type: ignore[attr-defined]


def _stacked(ax: Axes, y: list[int], first: list[int], second: list[int], labels: list[str],
             names: tuple[str, str] | None = None) -> None:
    """BookKeeper's bar, tiered storage's after it only where there is some, the total labelled."""
    bars = ax.barh(y, first, height=0.6, color=BK_COLOUR, label=names[0] if names else None)
    if any(second):
        bars = ax.barh(y, second, left=first, height=0.6, color=TIERED_COLOUR, label=names[1] if names else None)
    ax.bar_label(bars, labels=labels, padding=3, fontsize="small")


def groups_figure(rows: Sequence[Group], what: str, label_in: float) -> Figure:
    """Two panels sharing the names: reclaimable bytes and orphan counts, each stacked by storage.
    ``label_in``: the label column's width, the same for every group chart (see the module doc)."""
    height = 1.7 + 0.34 * len(rows)
    fig = Figure(figsize=(WIDTH_IN, height), dpi=DPI)
    left, right = (label_in + 0.25) / WIDTH_IN, 1 - 0.2 / WIDTH_IN
    panel = (right - left - _GAP_IN / WIDTH_IN) / 2
    fig.subplots_adjust(left=left, right=right, top=1 - 0.4 / height, bottom=0.8 / height,
                        wspace=_GAP_IN / WIDTH_IN / panel)
    by_bytes, by_count = fig.subplots(1, 2, sharey=True)
    y = list(range(len(rows)))
    _stacked(by_bytes, y, [g.ledger_bytes for g in rows], [g.object_bytes for g in rows],
             [human_bytes(g.total_bytes) for g in rows],
             ("BookKeeper: orphan ledgers", "tiered storage: orphan offloaded objects"))
    _stacked(by_count, y, [g.ledgers for g in rows], [g.objects for g in rows],
             [f"{g.ledgers + g.objects:,}" for g in rows])
    by_bytes.set_title(f"Reclaimable bytes by {what}")
    by_count.set_title(f"Orphans by {what} (count)")
    _bytes_axis(by_bytes, max(g.total_bytes for g in rows))
    _count_axis(by_count.xaxis)
    by_count.set_xlim(0, max(1, max(g.ledgers + g.objects for g in rows)) * _HEADROOM)
    by_bytes.set_yticks(y, [label(g.name) for g in rows])
    by_bytes.set_ylim(len(rows) - 0.5 + 0.2, -0.5 - 0.2)  # biggest on top; one bar is a bar, not a block
    for ax in (by_bytes, by_count):
        ax.grid(axis="x", alpha=0.3)
        ax.set_axisbelow(True)
    handles, names = by_bytes.get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncols=len(names), frameon=False)  # what has bars, only
    return fig


def age_figure(buckets: Sequence[AgeBucket]) -> Figure:
    """Orphan ledgers per age bucket, each bar with ledgers labelled with its bytes."""
    fig = Figure(figsize=(WIDTH_IN, 3.6), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    x = list(range(len(buckets)))
    bars = ax.bar(x, [b.orphan_ledgers for b in buckets], color=BK_COLOUR)
    ax.bar_label(bars, labels=[human_bytes(b.orphan_ledger_bytes) if b.orphan_ledgers else "" for b in buckets],
                 fontsize="small", padding=2)
    ax.set_xticks(x, [label(b.label) for b in buckets])
    _count_axis(ax.yaxis)
    ax.set_xlabel("age at scan time")
    ax.set_ylabel("orphan ledgers")
    ax.set_title("Age of orphan ledgers (bar labels: bytes)")
    ax.margins(y=0.15)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    return fig
