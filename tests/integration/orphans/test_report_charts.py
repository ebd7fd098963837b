"""``report.html`` as an operator sees it in Chromium, fixed and checked.

The page is opened in the suite's browser (Debian's chromium through playwright, as
tests/integration/orphans/test_report_in_browser.py) and a full-page screenshot of each case is kept as a test artifact
in ``build/test-artifacts/`` (or ``$TEST_ARTIFACTS_DIR``) for a person to look at.  What is drawn
inside the chart PNGs is checked on the figures that make them, with the canvas that renders them
(tick labels' boxes, bar labels, legend entries), since a browser sees an image as pixels.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.transforms import Bbox
from playwright.sync_api import Browser

from deletion_service.orphans import report, report_charts
from deletion_service.orphans.summary import AgeBucket, MissingLedger, NamespaceTotals, ReportData
from tests.integration.orphans.test_report_in_browser import CHROMIUM, DAY_S, GIB, _full_data, _open, _summary

ROOT = Path(__file__).resolve().parents[3]
ARTIFACTS = Path(os.environ.get("TEST_ARTIFACTS_DIR", ROOT / "build" / "test-artifacts"))


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} not found: apt-get install chromium (scripts/test.sh installs it)")
    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield launched
        launched.close()


def _one_tenant() -> ReportData:
    """One tenant, one namespace, 3 orphan ledgers, no offloaded object, two empty age bins, 2 missing."""
    summary = _summary(orphan_ledgers=3, missing_ledgers=2, orphan_ledger_bytes=3 * GIB)
    ages = [AgeBucket("1–7 d", DAY_S, 7 * DAY_S, 0, 0), AgeBucket("7–14 d", 7 * DAY_S, 14 * DAY_S, 3, 3 * GIB),
            AgeBucket("14–30 d", 14 * DAY_S, 30 * DAY_S, 0, 0)]
    missing = [MissingLedger(7, "ledger", "persistent://t/ns/x", None), MissingLedger(8, "ledger", "persistent://t/ns/x",
                                                                                      None)]
    return ReportData(summary, [NamespaceTotals("t", "t/ns", 3, 3 * GIB, 0, 0)], ages, missing)


def _figures(data: ReportData) -> tuple[Figure, Figure]:
    """The tenant and namespace charts exactly as the report draws them (one label column)."""
    tenants = report_charts.groups(data.by_namespace, lambda r: r.tenant)
    namespaces = report_charts.groups(data.by_namespace, lambda r: r.namespace)
    label_in = report_charts.label_width_in(g.name for g in tenants + namespaces)
    return (report_charts.groups_figure(tenants, "tenant", label_in),
            report_charts.groups_figure(namespaces, "namespace", label_in))


def _drawn(fig: Figure) -> Figure:
    FigureCanvasAgg(fig).draw()
    return fig


def _bar_labels(ax: Axes) -> list[str]:
    return [t.get_text() for t in ax.texts]


def _tick_boxes(ax: Axes) -> list[Bbox]:
    renderer = FigureCanvasAgg(ax.figure).get_renderer()  # type: ignore[arg-type]
    lo, hi = ax.get_xlim()
    return [t.get_window_extent(renderer) for loc, t in zip(ax.get_xticks(), ax.get_xticklabels(), strict=True)
            if lo <= loc <= hi and t.get_text()]  # the ticks drawn: inside the view


def test_one_tenant_is_bars_with_values_whole_counts_and_no_empty_legend() -> None:
    tenant_fig, _ = _figures(_one_tenant())
    by_bytes, by_count = _drawn(tenant_fig).axes
    assert _bar_labels(by_bytes) == ["3.0 GiB"] and _bar_labels(by_count) == ["3"]
    (bar,) = by_bytes.patches
    assert bar.get_window_extent().height < 0.5 * by_bytes.get_window_extent().height  # a bar, not a block
    assert all(v == int(v) for v in by_count.get_xticks())  # no half of an orphan
    (legend,) = tenant_fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["BookKeeper: orphan ledgers"]  # no tiered bars: no entry


def test_neighbouring_panels_never_share_tick_label_space() -> None:
    for fig in _figures(_full_data()) + _figures(_one_tenant()):
        by_bytes, by_count = _drawn(fig).axes
        left, right = _tick_boxes(by_bytes), _tick_boxes(by_count)
        assert max(b.x1 for b in left) + 10 < min(b.x0 for b in right), [b.x1 for b in left]
        for boxes in (left, right):
            assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:], strict=False))


def test_the_namespace_chart_is_as_wide_as_the_tenant_chart() -> None:
    for data in (_full_data(), _one_tenant()):
        tenant_fig, namespace_fig = _figures(data)
        for a, b in zip(_drawn(tenant_fig).axes, _drawn(namespace_fig).axes, strict=True):
            assert (a.get_window_extent().x0, a.get_window_extent().x1) == pytest.approx(
                (b.get_window_extent().x0, b.get_window_extent().x1))


def test_empty_age_bins_carry_no_label_and_counts_are_whole() -> None:
    ax = _drawn(report_charts.age_figure(_one_tenant().age_histogram)).axes[0]
    assert _bar_labels(ax) == ["", "3.0 GiB", ""]
    assert all(v == int(v) for v in ax.get_yticks())


CARD_STYLE = """el => { const s = getComputedStyle(el), dd = getComputedStyle(el.querySelector('dd'));
    return {border: parseFloat(s.borderTopWidth), colour: s.borderTopColor, background: s.backgroundColor,
            text: dd.color, size: parseFloat(dd.fontSize)}; }"""


@pytest.mark.parametrize("case", ["one-tenant", "full"])
def test_the_page_in_the_browser(browser: Browser, tmp_path: Path, case: str) -> None:
    data = _one_tenant() if case == "one-tenant" else _full_data()
    opened = _open(browser, report.write(data, tmp_path / "report.html"))
    page = opened.page
    cards = page.locator("#summary .counts > div")
    styles = [cards.nth(i).evaluate(CARD_STYLE) for i in range(cards.count())]
    missing, others = styles[0], styles[1:]
    assert "Missing ledgers" in cards.nth(0).inner_text()  # the alarm comes first
    assert missing["border"] >= 2 * max(o["border"] for o in others)
    assert missing["colour"] == missing["text"] == "rgb(164, 0, 29)"
    assert all(missing["background"] != o["background"] and missing["size"] > o["size"] for o in others)
    assert page.locator("#missing-card a[href='#missing']").count() == 1
    widths = page.eval_on_selector_all("#chart-tenant img, #chart-namespace img",
                                       "els => els.map(e => [e.naturalWidth, e.getBoundingClientRect().width])")
    assert len(widths) == 2 and widths[0] == widths[1]
    assert opened.outside == set() and opened.errors == []
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / f"report-{case}.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 50_000


def test_no_missing_ledgers_is_a_calm_card_still_shown(browser: Browser, tmp_path: Path) -> None:
    data = ReportData(_summary(orphan_ledgers=1), [NamespaceTotals("t", "t/ns", 1, 1024, 0, 0)])
    page = _open(browser, report.write(data, tmp_path / "report.html")).page
    card = page.locator("#missing-card")
    assert card.inner_text().split() == ["Missing", "ledgers", "0"]
    style, other = card.evaluate(CARD_STYLE), page.locator("#summary .counts > div").nth(1).evaluate(CARD_STYLE)
    assert (style["border"], style["background"], style["size"]) == (other["border"], other["background"],
                                                                     other["size"])
