"""``report.html`` opened in a real headless browser: charts render, alarms come first, nothing leaves the page.

Why a browser and not string checks: "self-contained" and "does not execute a hostile topic
name" are properties of what a browser does with the file.  Debian's ``chromium`` is driven by
``playwright`` with ``executable_path`` (no browser download; ``scripts/test.sh`` installs it).
A missing chromium fails these tests with a message — it never skips them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Route, sync_playwright

from deletion_service.orphans import report
from deletion_service.orphans.summary import AgeBucket, MissingLedger, NamespaceTotals, ReportData, ScanSummary

CHROMIUM = Path("/usr/bin/chromium")
HOSTILE = "persistent://evil/ns/<script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\">"
SCANNED_AT_MS = 1_760_000_000_000
DAY_S = 86_400
GIB = 1024**3


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} not found: the report tests need Debian's chromium "
                    "(apt-get install chromium; scripts/test.sh installs it)")
    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield launched
        launched.close()


@dataclass
class Opened:
    """A page plus everything it tried to fetch beyond itself, and what it logged as an error."""

    page: Page
    outside: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)


def _open(browser: Browser, path: Path) -> Opened:
    """Open ``path``; every request other than the page itself or a ``data:`` URI is recorded and aborted.

    Both the router and the request event record, so a request one of them does not see is still counted."""
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    opened = Opened(page)
    page_url = path.resolve().as_uri()

    def leaves(url: str) -> bool:
        return url != page_url and not url.startswith("data:")

    def route(r: Route) -> None:
        if leaves(r.request.url):
            opened.outside.add(r.request.url)
            r.abort()
        else:
            r.continue_()

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":
            opened.errors.append(message.text)

    page.route("**/*", route)
    page.on("request", lambda request: opened.outside.add(request.url) if leaves(request.url) else None)
    page.on("console", console)
    page.on("pageerror", lambda error: opened.errors.append(str(error)))
    page.goto(page_url, wait_until="load")
    return opened


def _summary(**overrides: object) -> ScanSummary:
    values = dict(orphan_ledgers=0, orphan_offloaded_objects=0, missing_ledgers=0, orphan_ledger_bytes=0,
                  orphan_object_bytes=0, scanned_ledgers=12_000, references=11_500, scanned_objects=300,
                  min_age_s=7 * DAY_S, scanned_at_ms=SCANNED_AT_MS)
    values.update(overrides)
    return ScanSummary(**values)


def _full_data() -> ReportData:
    """25 namespaces over 4 tenants (one hostile) so "other" appears, 3 of 1,003 missing ledgers listed."""
    namespaces = [NamespaceTotals(f"tenant-{i % 4}", f"tenant-{i % 4}/ns-{i:02d}", 10 + i, (i + 1) * GIB // 4,
                                  i % 3, (i % 3) * GIB // 8) for i in range(24)]
    namespaces.append(NamespaceTotals("evil", "evil/<b>ns</b>$x$", 7, 40 * GIB, 1, GIB))
    ages = [AgeBucket("7–14 d", 7 * DAY_S, 14 * DAY_S, 120, 30 * GIB), AgeBucket("14–30 d", 14 * DAY_S, 30 * DAY_S,
            200, 60 * GIB), AgeBucket("30–90 d", 30 * DAY_S, 90 * DAY_S, 80, 50 * GIB),
            AgeBucket("> 90 d", 90 * DAY_S, None, 40, 70 * GIB)]
    missing = [MissingLedger(11, "ledger", "persistent://tenant-0/ns-00/orders", None),
               MissingLedger(12, "cursor", HOSTILE, "<i>sub</i>"),
               MissingLedger(13, "schema", "persistent://tenant-1/ns-01/users", "tenant-1/ns-01/users")]
    largest = [{"ledgerId": 900 + i, "topic": HOSTILE if i == 0 else f"persistent://tenant-2/ns-02/t{i}",
                "tenant": "tenant-2", "namespace": "tenant-2/ns-02", "component": "managed-ledger", "cursor": None,
                "schemaId": None, "ctimeMs": SCANNED_AT_MS - (10 + i) * DAY_S * 1000, "length": (5 - i) * GIB}
               for i in range(5)]
    summary = _summary(orphan_ledgers=440, orphan_offloaded_objects=25, missing_ledgers=1003,
                       orphan_ledger_bytes=210 * GIB, orphan_object_bytes=4 * GIB)
    return ReportData(summary, namespaces, ages, missing, largest)


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def test_the_recorder_sees_requests_that_leave_the_page(browser: Browser, tmp_path: Path) -> None:
    """The detector itself: a stylesheet on another host and a relative image are both caught."""
    page = tmp_path / "leaky.html"
    page.write_text('<link rel="stylesheet" href="https://fonts.example.invalid/a.css"><img src="x.png">'
                    '<img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=">')
    opened = _open(browser, page)
    assert opened.outside == {"https://fonts.example.invalid/a.css", (tmp_path / "x.png").as_uri()}


def test_the_report_in_a_browser(browser: Browser, tmp_path: Path) -> None:
    path = report.write(_full_data(), tmp_path / "out" / "report.html")
    opened = _open(browser, path)
    page = opened.page

    images = page.eval_on_selector_all(
        "img", "els => els.map(e => ({complete: e.complete, width: e.naturalWidth, alt: e.alt,"
               " shown: e.getBoundingClientRect().width}))")
    assert len(images) == 3  # by tenant, by namespace, ages
    assert all(i["complete"] and i["width"] > 0 and i["shown"] > 0 and i["alt"] for i in images), images

    assert page.evaluate("""() => {
        const missing = document.getElementById('missing'), charts = document.getElementById('charts');
        return Boolean(missing.compareDocumentPosition(charts) & Node.DOCUMENT_POSITION_FOLLOWING)
            && missing.getBoundingClientRect().bottom <= charts.getBoundingClientRect().top; }""")
    assert "1,000 more in missing_ledgers.parquet" in page.inner_text("#missing")

    assert page.evaluate("window.__pwned") is None
    assert page.locator("script").count() == 0
    assert page.locator("#missing td", has_text="<script>").inner_text() == HOSTILE
    assert page.locator("#largest td", has_text="<script>").inner_text() == HOSTILE
    assert "evil/<b>ns</b>$x$" in page.text_content("#chart-namespace table")
    assert "other (" in page.text_content("#chart-namespace table")  # 25 namespaces: top 20 + other

    headline = page.inner_text("#summary")
    for text in ("440", "25", "1,003", "214.0 GiB", "7 d", "2025-10-09"):
        assert text in headline, (text, headline)
    assert "scan-orphans --enqueue" in page.inner_text("#next")

    assert opened.outside == set(), "requests left the page"
    assert opened.errors == []
    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    width, height = _png_size(shot)
    assert width >= 1280 and height > 900 and shot.stat().st_size > 50_000


def test_an_empty_scan_is_a_calm_page(browser: Browser, tmp_path: Path) -> None:
    path = report.write(ReportData(_summary()), tmp_path / "report.html")
    opened = _open(browser, path)
    page = opened.page
    assert page.locator("img").count() == 0
    assert page.locator("#missing, #charts, #largest").count() == 0
    assert "No orphans found" in page.inner_text("#no-orphans")
    assert opened.outside == set() and opened.errors == []
    shot = tmp_path / "empty.png"
    page.screenshot(path=str(shot), full_page=True)
    assert _png_size(shot)[0] >= 1280 and shot.stat().st_size > 5_000


def test_missing_ledgers_without_orphans_still_raise_the_alarm() -> None:
    data = ReportData(_summary(missing_ledgers=1), missing=[MissingLedger(7, "compacted", "persistent://a/b/c", None)])
    html = report.render(data)
    assert html.index('id="missing"') < html.index('id="no-orphans"')
    assert "<img" not in html and "more in missing_ledgers.parquet" not in html


def test_orphans_of_zero_bytes_still_chart() -> None:
    """Empty ledgers are orphans too: a bytes axis of 0 B must not break the chart."""
    data = ReportData(_summary(orphan_ledgers=2), [NamespaceTotals("t", "t/ns", 2, 0, 0, 0)],
                      [AgeBucket("7–14 d", 7 * DAY_S, 14 * DAY_S, 2, 0)])
    assert report.render(data).count("<img src=\"data:image/png;base64,") == 3


def test_data_never_reaches_the_page_as_markup() -> None:
    html = report.render(_full_data())
    assert "<script" not in html and "<b>ns</b>" not in html and "<i>sub</i>" not in html
    assert "&lt;script&gt;" in html


@pytest.mark.parametrize("n,text", [(0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (5 * GIB, "5.0 GiB"),
                                    (3 * 1024**6, "3072.0 PiB")])
def test_human_bytes(n: int, text: str) -> None:
    assert report.human_bytes(n) == text


def test_orphan_ledgers_are_shown_by_kind() -> None:
    """Each kind is reclaimed through its own request type, so the page and summary.json count each."""
    by_kind = {"data": 3, "cursor": 1, "schema": 0, "compacted": 2, "delayed-bucket": 4, "other": 0}
    sizes = {**dict.fromkeys(by_kind, 0), "compacted": 3 * GIB, "delayed-bucket": 2048}
    summary = _summary(orphan_ledgers=10, orphan_ledgers_by_kind=by_kind, orphan_ledger_bytes_by_kind=sizes)
    html = report.render(ReportData(summary, [NamespaceTotals("t", "t/ns", 10, 3 * GIB, 0, 0)]))
    section = html[html.index('id="kinds"'):html.index("</section>", html.index('id="kinds"'))]
    for label, n, size in (("Data ledgers", "3", "0 B"), ("Cursor ledgers", "1", "0 B"), ("Schema ledgers", "0", "0 B"),
                           ("Compacted-topic ledgers", "2", "3.0 GiB"), ("Delayed-delivery buckets", "4", "2.0 KiB")):
        assert f'<td class="name">{label}</td><td class="n">{n}</td><td class="n">{size}</td>' in section, label
    assert "Other Pulsar ledgers" not in section  # shown only when there are some
    as_json = summary.to_json()
    assert (as_json["orphanLedgers"], as_json["orphanLedgersByKind"]) == (10, by_kind)
    assert all(isinstance(as_json[k], int) for k in ("orphanLedgers", "orphanOffloadedObjects", "missingLedgers"))
