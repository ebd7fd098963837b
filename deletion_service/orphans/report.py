"""``report.html``: what a scan found, for a person, in one self-contained file.

Why self-contained: the report is opened where the scan left it — a bastion host, a CI
artifact, a laptop without access to anything — and a page that fetches CSS, fonts or
scripts either breaks there or tells a third party that someone is reading the cluster's
topic names.  So the page is one file: inline CSS, no script at all, charts drawn by
matplotlib's non-GUI Agg canvas into PNGs embedded as ``data:`` URIs, and a
Content-Security-Policy that forbids anything else, should a later edit slip one in.

Why this order: missing ledgers (referenced by Pulsar, absent from storage) are possible
data loss that no deletion fixes, so they open the page as an alarm; reclaimable space is
the routine news after them, and an empty scan is a calm page without empty charts.

Every string taken from the data (topics, namespaces, cursor names — operator-controlled)
goes through :func:`html.escape`; chart labels are drawn into pixels, with ``$`` escaped
so matplotlib does not read a name as mathtext.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from html import escape
from pathlib import Path

from deletion_service.orphans import report_charts as charts
from deletion_service.orphans.report_charts import TOP_GROUPS, Group
from deletion_service.orphans.summary import AgeBucket, MissingLedger, ReportData
from deletion_service.orphans.units import human_bytes, human_duration

__all__ = ["human_bytes", "human_duration", "render", "write"]

#: Rows of the largest-orphans table at most (all orphans are in orphan_ledgers.parquet).
LARGEST_SHOWN = 100

_CSS = """
:root { color-scheme: light; --ink: #1b1b1b; --muted: #555; --line: #d0d4da; --alarm: #a4001d;
        --alarm-bg: #fff1f2; --calm: #1e6b3a; --calm-bg: #effaf2; }
* { box-sizing: border-box; }
body { font: 16px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       color: var(--ink); background: #fff; max-width: 72rem; margin: 0 auto; padding: 1.5rem; }
h1 { font-size: 1.7rem; margin: 0 0 .25rem; } h2 { font-size: 1.3rem; margin: 2rem 0 .5rem; }
.meta, .note, figcaption { color: var(--muted); }
.counts { display: flex; flex-wrap: wrap; gap: .75rem; margin: 1rem 0; padding: 0; }
.counts div { border: 1px solid var(--line); border-radius: .5rem; padding: .6rem 1rem; min-width: 11rem; }
.counts dt { font-size: .9rem; color: var(--muted); } .counts dd { margin: 0; font-size: 1.6rem; font-weight: 600; }
.counts .bad { border: 4px solid var(--alarm); background: var(--alarm-bg); min-width: 15rem;
               box-shadow: 0 0 0 3px var(--alarm-bg), 0 2px 8px rgba(164, 0, 29, .35); }
.counts .bad dt { color: var(--alarm); font-weight: 700; } .counts .bad dd { color: var(--alarm); font-size: 2.2rem; }
.counts .bad a { color: var(--alarm); font-weight: 600; }
.counts small { display: block; color: var(--muted); font-size: .85rem; }
.alarm { border: 3px solid var(--alarm); background: var(--alarm-bg); border-radius: .5rem; padding: 0 1rem 1rem; }
.alarm h2 { color: var(--alarm); }
.calm { border: 2px solid var(--calm); background: var(--calm-bg); border-radius: .5rem; padding: 0 1rem 1rem; }
.calm h2 { color: var(--calm); }
table { border-collapse: collapse; width: 100%; margin: .5rem 0; font-size: .95rem; }
caption { text-align: left; font-weight: 600; padding: .25rem 0; }
th, td { border-bottom: 1px solid var(--line); padding: .3rem .5rem; text-align: left; vertical-align: top; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.name { overflow-wrap: anywhere; }
.scroll { max-height: 28rem; overflow: auto; }
figure { margin: 1.5rem 0; } figure img { max-width: 100%; height: auto; display: block; }
code { background: #f2f3f5; padding: 0 .25rem; border-radius: .2rem; }
"""

_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


def render(data: ReportData) -> str:
    """The whole page as text: headline, missing ledgers (if any), charts and tables, what next."""
    s = data.summary
    has_orphans = s.orphan_ledgers > 0 or s.orphan_offloaded_objects > 0
    parts = [_headline(data)]
    if s.missing_ledgers > 0:
        parts.append(_missing_section(data.missing, s.missing_ledgers))
    if has_orphans:
        parts += [_kinds_section(data), _charts_section(data), _largest_section(data.largest_orphans, s.scanned_at_ms),
                  _next_section()]
    else:
        parts.append(_no_orphans_section(s.min_age_s))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{_CSP}\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<title>Orphan-ledger scan, {escape(_when(s.scanned_at_ms))}</title>\n"
        f"<style>{_CSS}</style>\n</head>\n<body>\n<main>\n" + "\n".join(parts) + "\n</main>\n</body>\n</html>\n"
    )


def write(data: ReportData, path: Path) -> Path:
    """Write :func:`render`'s page to ``path`` (UTF-8), creating its directory; return ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(data), encoding="utf-8")
    return path


# --- formatting -------------------------------------------------------------------------------

def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _table(caption: str | None, headers: Sequence[tuple[str, bool]], rows: Iterable[Sequence[str]],
           labelled_by: str | None = None) -> str:
    """A table whose cells are already escaped; ``headers`` are (title, numeric?).  A table right under a
    heading that says what it holds takes its name from that heading (``labelled_by``, the heading's
    id) instead of a caption, which would repeat the heading's words right below it."""
    numeric = ' class="n"'
    head = "".join(f"<th scope=\"col\"{numeric if num else ''}>{escape(h)}</th>" for h, num in headers)
    body = "".join("<tr>" + "".join(f"<td class=\"{'n' if num else 'name'}\">{cell}</td>"
                                    for cell, (_, num) in zip(row, headers, strict=True)) + "</tr>\n"
                   for row in rows)
    named = f' aria-labelledby="{labelled_by}"' if labelled_by is not None else ""
    titled = f"<caption>{escape(caption)}</caption>\n" if caption is not None else ""
    return f"<table{named}>\n{titled}<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody>\n</table>"


# --- sections ---------------------------------------------------------------------------------

def _headline(data: ReportData) -> str:
    s = data.summary
    reclaim = s.orphan_ledger_bytes + s.orphan_object_bytes
    # The data-loss alarm comes first and, when there is any, looks like one: red, thick, larger.
    missing = (f'<div id="missing-card" class="bad"><dt>⚠ Missing ledgers</dt><dd>{s.missing_ledgers:,}</dd>'
               '<small><a href="#missing">possible data loss: see below</a></small></div>' if s.missing_ledgers
               else f'<div id="missing-card"><dt>Missing ledgers</dt><dd>{s.missing_ledgers:,}</dd></div>')
    return f"""<header id="summary">
<h1>Orphan-ledger scan</h1>
<p class="meta">Scanned {escape(_when(s.scanned_at_ms))} with minimum age {escape(human_duration(s.min_age_s))}:
{s.scanned_ledgers:,} BookKeeper ledgers, {s.references:,} references and {s.scanned_objects:,}
tiered-storage objects read.</p>
<dl class="counts">
{missing}
<div><dt>Orphan ledgers</dt><dd>{s.orphan_ledgers:,}</dd></div>
<div><dt>Orphan offloaded objects</dt><dd>{s.orphan_offloaded_objects:,}</dd></div>
<div><dt>Reclaimable</dt><dd title="{reclaim:,} bytes">{escape(human_bytes(reclaim))}</dd>
<small>BookKeeper {escape(human_bytes(s.orphan_ledger_bytes))} · tiered storage
{escape(human_bytes(s.orphan_object_bytes))}</small></div>
</dl>
</header>"""


def _missing_section(listed: Sequence[MissingLedger], total: int) -> str:
    """The data-loss alarm: what is referenced but gone, and where the rest of the list is."""
    rows = [(str(m.ledger_id), escape(m.kind), escape(m.topic), escape(m.detail or "")) for m in listed]
    table = _table(f"Missing ledgers (first {len(listed):,}, by ledger id)",
                   [("Ledger", True), ("Referenced as", False), ("Topic", False), ("Detail", False)], rows)
    more = total - len(listed)
    more_note = (f"<p><strong>{more:,} more in <code>missing_ledgers.parquet</code>.</strong></p>"
                 if more > 0 else "")
    noun = "ledger is" if total == 1 else "ledgers are"
    return f"""<section id="missing" class="alarm" aria-labelledby="missing-h">
<h2 id="missing-h">⚠ {total:,} missing {"ledger" if total == 1 else "ledgers"}: possible data loss</h2>
<p>{total:,} {noun} referenced by Pulsar's metadata (a topic's ledger list, a cursor, a schema,
a compacted topic) but absent from storage: reads that reach them fail. Deleting does not fix
this and nothing is enqueued for them. Look for lost bookies or a ledger deleted outside Pulsar,
restore from a backup, or repair the topic's metadata.</p>
<div class="scroll">{table}</div>
{more_note}
</section>"""


def _no_orphans_section(min_age_s: int) -> str:
    return f"""<section id="no-orphans" class="calm" aria-labelledby="no-orphans-h">
<h2 id="no-orphans-h">No orphans found</h2>
<p>Every closed Pulsar ledger older than {escape(human_duration(min_age_s))} is referenced, and every
tiered-storage object belongs to a known offload. There is nothing to reclaim and nothing to enqueue.</p>
</section>"""


#: How the report names each ``reference_model.LedgerKind`` value, and what an orphan of it is.
KIND_LABELS = {
    "data": ("Data ledgers", "a managed ledger's entries no ledger list names"),
    "cursor": ("Cursor ledgers", "a subscription's state no cursor node points at"),
    "schema": ("Schema ledgers", "schema versions no schema locator names"),
    "compacted": ("Compacted-topic ledgers", "no visible __compaction cursor names it (topic deleted: #21745)"),
    "delayed-bucket": ("Delayed-delivery buckets", "no cursor property names it (subscription gone or bucket "
                                                   "merged: #22802)"),
    "other": ("Other Pulsar ledgers", "a component no request type covers: reported, never enqueued"),
}


def _kinds_section(data: ReportData) -> str:
    """Orphan ledgers per kind (each kind is reclaimed through its own request type)."""
    s = data.summary
    rows = []
    for kind, n in s.orphan_ledgers_by_kind.items():
        if n or kind != "other":
            label, meaning = KIND_LABELS.get(kind, (kind, ""))
            rows.append((escape(label), f"{n:,}", escape(human_bytes(s.orphan_ledger_bytes_by_kind.get(kind, 0))),
                         escape(meaning)))
    table = _table(None, [("Kind", False), ("Ledgers", True), ("Size", True), ("An orphan of this kind is", False)],
                   rows, labelled_by="kinds-h")
    return f"""<section id="kinds" aria-labelledby="kinds-h">
<h2 id="kinds-h">Orphan ledgers by kind</h2>
{table}
</section>"""


def _largest_section(rows: Sequence[dict], scanned_at_ms: int) -> str:
    """The biggest orphan ledgers, rows of ``ORPHAN_LEDGERS`` (see :mod:`.schemas`)."""
    if not rows:
        return ""
    ordered = sorted(rows, key=lambda r: -(r.get("length") or 0))[:LARGEST_SHOWN]
    cells = []
    for r in ordered:
        owner = r.get("cursor") or r.get("schemaId")
        component = (r.get("component") or "") + (f" ({owner})" if owner else "")
        ctime = r.get("ctimeMs")
        cells.append((escape(str(r.get("ledgerId"))), escape(r.get("topic") or "(none named)"), escape(component),
                      escape(human_bytes(r.get("length") or 0)),
                      escape(human_duration(max(0, (scanned_at_ms - ctime) // 1000)) if ctime is not None else "?"),
                      escape(_when(ctime) if ctime is not None else "?")))
    table = _table(f"The {len(ordered):,} largest orphan ledgers",
                   [("Ledger", True), ("Topic", False), ("Component", False), ("Size", True), ("Age", True),
                    ("Created", True)], cells)
    return f"""<section id="largest" aria-labelledby="largest-h">
<h2 id="largest-h">Largest orphan ledgers</h2>
<div class="scroll">{table}</div>
<p class="note">All orphans are in <code>orphan_ledgers.parquet</code> and <code>orphan_objects.parquet</code>.</p>
</section>"""


def _next_section() -> str:
    return """<section id="next" aria-labelledby="next-h">
<h2 id="next-h">What next</h2>
<ol>
<li>A scan deletes nothing. To request the deletion of these orphans, run it again with
<code>ledger-deletion scan-orphans --enqueue</code> (and the same options as this scan).</li>
<li>Each orphan becomes a <code>reason: orphan</code> request. The delete phase re-verifies every one
against the metadata store and BookKeeper's own metadata before deleting, so a ledger that became
referenced after this scan is kept.</li>
<li>Follow progress with <code>ledger-deletion inflight</code> and <code>ledger-deletion dlq list</code>.</li>
</ol>
</section>"""


# --- charts (drawn by report_charts) -----------------------------------------------------

def _groups_alt(groups: Sequence[Group], what: str) -> str:
    top = "; ".join(f"{g.name}: {human_bytes(g.total_bytes)}, {g.ledgers:,} ledgers, {g.objects:,} objects"
                    for g in groups[:3])
    return (f"Bar charts of reclaimable bytes and orphan counts by {what}, {len(groups)} bars. "
            f"Largest: {top}.")


def _groups_figure_html(groups: Sequence[Group], what: str, fig_id: str, label_in: float) -> str:
    """The chart, its alt text, and the same numbers as a table for reading exactly."""
    rows = [(escape(g.name), escape(human_bytes(g.total_bytes)), escape(human_bytes(g.ledger_bytes)),
             escape(human_bytes(g.object_bytes)), f"{g.ledgers:,}", f"{g.objects:,}") for g in groups]
    table = _table(f"Orphans by {what}", [(what.capitalize(), False), ("Reclaimable", True), ("BookKeeper", True),
                                           ("Tiered storage", True), ("Ledgers", True), ("Objects", True)], rows)
    image = charts.png_data_uri(charts.groups_figure(groups, what, label_in))
    return f"""<figure id="{fig_id}">
<img src="{image}" alt="{escape(_groups_alt(groups, what))}">
<figcaption>By {escape(what)}: the top {TOP_GROUPS} by reclaimable bytes, the rest summed as "other".</figcaption>
<details><summary>The numbers</summary><div class="scroll">{table}</div></details>
</figure>"""


def _age_figure_html(buckets: Sequence[AgeBucket]) -> str:
    alt = "Histogram of orphan ledger ages: " + "; ".join(
        f"{b.label}: {b.orphan_ledgers:,} ledgers, {human_bytes(b.orphan_ledger_bytes)}" for b in buckets) + "."
    return f"""<figure id="chart-age">
<img src="{charts.png_data_uri(charts.age_figure(buckets))}" alt="{escape(alt)}">
<figcaption>Orphan ledgers by age at scan time; older orphans are the safest to reclaim.</figcaption>
</figure>"""


def _charts_section(data: ReportData) -> str:
    """Charts only for what has data: an empty chart says nothing a sentence could not."""
    figures = []
    if data.by_namespace:
        tenants = charts.groups(data.by_namespace, lambda r: r.tenant)
        namespaces = charts.groups(data.by_namespace, lambda r: r.namespace)
        label_in = charts.label_width_in(g.name for g in tenants + namespaces)  # one column: plots line up
        figures.append(_groups_figure_html(tenants, "tenant", "chart-tenant", label_in))
        figures.append(_groups_figure_html(namespaces, "namespace", "chart-namespace", label_in))
    if any(b.orphan_ledgers for b in data.age_histogram):
        figures.append(_age_figure_html(data.age_histogram))
    if not figures:
        return ""
    return ("<section id=\"charts\" aria-labelledby=\"charts-h\">\n<h2 id=\"charts-h\">Where the space is</h2>\n"
            + "\n".join(figures) + "\n</section>")
