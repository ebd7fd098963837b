"""``scan-orphans``: find ledgers and offloaded objects nothing references, at cluster scale with Spark.

Read-only and safe next to live brokers unless ``--enqueue``, and even then it only
sends ``reason: orphan`` requests: the delete phase re-verifies each one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from deletion_service.cli import connections, options, settings, ui
from deletion_service.cli.options import CommonOptions
from deletion_service.config import DeletionConfig
from deletion_service.errors import UsageError, UserError
from deletion_service.orphans import reports_dir as reports
from deletion_service.orphans.push import push_summary
from deletion_service.orphans.scan_options import DEFAULT_MASTER, DEFAULT_MIN_AGE, parse_duration
from metastore.formats.pulsar_paths import MANAGED_LEDGERS_ROOT, SCHEMAS_ROOT

if TYPE_CHECKING:
    from deletion_service.orphans.scan import ScanOutcome, ScanSources
    from deletion_service.orphans.summary import MissingLedger, ScanSummary

HELP = """Find orphan ledgers (in BookKeeper, `application=pulsar`, CLOSED, older than --min-age,
referenced nowhere), orphan offloaded objects, and **missing ledgers** (referenced but absent
from storage: a data-loss alarm).  Dry-run unless --enqueue, which sends each orphan ledger to
the deletion topic as a `reason: orphan` request for the daemon to verify and delete.

Runs on Spark: `local[*]` by default, or a cluster with --spark-master (or under `spark-submit`).
"""


#: The packages of the ``scan`` extra (pyproject.toml), absent from the daemon's image.
SCAN_EXTRA = frozenset({"pyspark", "py4j", "matplotlib"})


def register(app: typer.Typer) -> None:
    app.command("scan-orphans", help=HELP)(scan_orphans)


def scan_orphans(
    ctx: typer.Context,
    output: Annotated[Path | None, typer.Option(
        help="directory for orphan_ledgers.parquet, missing_ledgers.parquet, orphan_objects.parquet, "
             "summary.json and report.html")] = None,
    min_age: Annotated[str, typer.Option(help="ignore ledgers and objects younger than this: 1d, 6h, 90m, 2w")] = (
        DEFAULT_MIN_AGE),
    enqueue: Annotated[bool, typer.Option(
        help="send orphan ledgers and offloaded objects to the deletion topic (default: report only)")] = False,
    spark_master: Annotated[str | None, typer.Option(
        help=f"Spark master URL, e.g. spark://host:7077; default: spark-submit's --master, else {DEFAULT_MASTER}",
        show_default=False)] = None,
    snapshot: Annotated[Path | None, typer.Option(
        help="read the inventories from this directory if it holds a snapshot (offline re-run); "
             "else scan and save them there as Parquet")] = None,
    pushgateway: Annotated[str | None, typer.Option(
        help="push the scan's counts (missing and orphan ledgers, …) to this Prometheus Pushgateway, "
             "e.g. http://pushgateway:9091, for the LedgerDeletionMissingLedgers alert",
        show_default=False)] = None,
    spark_conf: Annotated[list[str] | None, typer.Option(
        help="a Spark setting KEY=VALUE, e.g. spark.driver.memory=2g (repeatable; applied when Spark starts)",
        show_default=False)] = None,
    reports_dir: Annotated[Path | None, typer.Option(
        help="keep each scan's outputs in DIR/scan-YYYYMMDDTHHMMSSZ/ (UTC; DIR/latest: the newest), as --output would; "
             "for a scheduled scan on a volume that outlives it", show_default=False)] = None,
    keep_reports: Annotated[int, typer.Option(
        help="with --reports-dir: keep the newest N scans' directories, remove older ones")] = 14,
) -> None:
    # pyspark loads only for this command: every other command starts faster without it (and the
    # daemon's image has neither pyspark nor matplotlib: the scan extra is the Spark image's)
    try:
        from deletion_service.orphans.progress import ScanProgress
        from deletion_service.orphans.scan import has_snapshot, run_scan
        from deletion_service.orphans.spark import session
    except ModuleNotFoundError as e:
        if (e.name or "").partition(".")[0] not in SCAN_EXTRA:
            raise
        raise UsageError(f"the orphan scan needs the scan extra ({e.name} is not installed here): run it from the "
                         "Spark image, or pip install 'ledger-deletion[scan]'") from None

    opts = options.get(ctx)
    cfg = settings.load(opts).config
    min_age_s = parse_duration(min_age)
    conf = parse_spark_conf(spark_conf or [])
    if output is not None and reports_dir is not None:
        raise UsageError("--output and --reports-dir both say where the outputs go: give one")
    if keep_reports < 1:
        raise UsageError(f"--keep-reports must be 1 or more (this scan's report is kept), got {keep_reports}")
    started_s = time.time()
    target = reports.run_dir(reports_dir, started_s) if reports_dir is not None else output
    console = Console(stderr=True)
    sources = None if snapshot is not None and has_snapshot(snapshot) else _sources(opts, cfg)
    if enqueue and sources is not None:
        _refuse_a_store_without_pulsar(opts, cfg)
    with console.status("starting Spark…") as status:
        if not console.is_terminal:  # a log reads what the scan does from its first second to its last
            _line_printer(console)("scan-orphans [0 s] starting Spark")
        spark = session(spark_master, debug=opts.debug, conf=conf)
        show = status.update if console.is_terminal else _line_printer(console)
        progress = ScanProgress(spark.sparkContext, show, console.is_terminal).start()
        try:
            outcome = run_scan(spark, sources, min_age_s, target, snapshot, step=progress.step)
            if enqueue:
                progress.step("enqueueing the orphans")
            enqueued = _enqueue(opts, cfg, outcome) if enqueue else None
        finally:
            progress.stop("stopping Spark")
            spark.stop()
    if reports_dir is not None and target is not None:
        reports.finish(reports_dir, target, keep_reports)
    _print(opts, outcome, enqueued, target)
    if pushgateway is not None:
        push_summary(pushgateway, outcome.data.summary, cluster=cfg.cluster_name)


def parse_spark_conf(pairs: list[str]) -> dict[str, str]:
    """``--spark-conf KEY=VALUE`` (repeated) → settings; a pair without ``=`` is a usage error."""
    conf: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--spark-conf expects KEY=VALUE, e.g. spark.driver.memory=2g, got {pair!r}")
        conf[key.strip()] = value
    return conf


def _line_printer(console: Console) -> Callable[[str], None]:
    """Progress as plain lines (stderr is a log, not a terminal)."""
    return lambda line: console.print(line, markup=False, highlight=False, soft_wrap=True)


def _sources(opts: CommonOptions, cfg: DeletionConfig) -> ScanSources:
    from deletion_service.orphans.inventory import StoreSpec
    from deletion_service.orphans.scan import ScanSources

    # Open each store once now: a missing embedded store or an unreachable ZooKeeper fails in a
    # line here, before Spark starts (the inventory tasks open their own clients later).
    urls = {connections.store_url(opts, bookkeeper=bk): bk for bk in (True, False)}
    for bookkeeper in urls.values():
        connections.open_metadata_store(opts, cfg, bookkeeper=bookkeeper, must_exist=True).close()
    digest = cfg.metadata_store_digest_file
    return ScanSources(StoreSpec(connections.store_url(opts), digest),
                       StoreSpec(connections.store_url(opts, bookkeeper=True), digest), cfg,
                       connections.offload_settings(opts, cfg))


def refuse_unreferenced(summary: ScanSummary, store_url: str) -> None:
    """Every Pulsar ledger unreferenced: far likelier a wrong --metadata-store (or a chroot missing from
    it) than a cluster whose topics are all gone.  Never enqueue on that."""
    if summary.references == 0 and summary.orphan_ledgers + summary.orphan_offloaded_objects > 0:
        raise UserError(f"found no references to any ledger in {store_url}, so all {summary.orphan_ledgers} Pulsar "
                        "ledger(s) look orphaned: check --metadata-store (and its chroot); nothing was sent")


def _refuse_a_store_without_pulsar(opts: CommonOptions, cfg: DeletionConfig) -> None:
    """Before Spark starts: BookKeeper holds ledgers but the metadata store holds no Pulsar metadata at
    all (no topic, no schema) is far likelier a wrong --metadata-store than a cluster whose every topic
    is gone.  The same refusal as after a scan that found no reference (:func:`_enqueue`), a minute
    sooner; that one still covers topics that list nothing."""
    with connections.open_metadata_store(opts, cfg, must_exist=True) as store:
        pulsar = store.children(MANAGED_LEDGERS_ROOT) or store.children(SCHEMAS_ROOT)
    if pulsar:
        return
    with connections.open_metadata_store(opts, cfg, bookkeeper=True, must_exist=True) as bk_store:
        ledgers = [c for c in bk_store.children(cfg.bookkeeper_ledgers_root_path) if c.isdigit() or c.startswith("L")]
    if ledgers:
        raise UserError(f"found no references to any ledger in {connections.store_url(opts)} (no topic, no schema), "
                        "so every ledger in BookKeeper would look orphaned: check --metadata-store (and its chroot); "
                        "nothing was sent (the scan did not start)")


def _enqueue(opts: CommonOptions, cfg: DeletionConfig, outcome: ScanOutcome) -> dict:
    from deletion_service.orphans.inventory import OffloadScope
    from deletion_service.orphans.requests import enqueue_orphans

    summary = outcome.data.summary
    refuse_unreferenced(summary, connections.store_url(opts))
    total = summary.orphan_ledgers + summary.orphan_offloaded_objects  # objects: an upper bound (data + index)
    scope = OffloadScope.of(cfg, connections.offload_settings(opts, cfg))
    with connections.publisher(opts, cfg) as publisher, ui.progress(total > 0 and not opts.json) as bar:
        task = bar.add_task("enqueueing orphans", total=total)
        result = enqueue_orphans(outcome.results.orphan_ledgers, publisher.send_request,
                                 progress=lambda n: bar.update(task, completed=n),
                                 objects=outcome.results.orphan_objects, scope=scope)
    return result.to_json()


def _print(opts: CommonOptions, outcome: ScanOutcome, enqueued: dict | None, output: Path | None) -> None:
    summary = outcome.data.summary
    listed = outcome.data.missing[:MISSING_LOGGED]
    if opts.json:
        typer.echo(json.dumps({**summary.to_json(), "enqueued": enqueued, "fromSnapshot": outcome.from_snapshot,
                               "notListed": outcome.refused_locations, "written": [str(p) for p in outcome.written],
                               "missing": [{"ledgerId": m.ledger_id, "kind": m.kind, "topic": m.topic}
                                           for m in listed]}))
        return
    console = Console()
    table = Table(title="orphan scan" + (" (from a snapshot)" if outcome.from_snapshot else ""), show_header=False)
    # the data-loss alarm: always shown, 0 included, so its absence never reads as "fine"
    table.add_row(ui.styled("missing ledgers (referenced, absent)", "bold red") if summary.missing_ledgers else
                  "missing ledgers (referenced, absent)", str(summary.missing_ledgers))
    table.add_row("orphan ledgers", f"{summary.orphan_ledgers} ({ui.size(summary.orphan_ledger_bytes)})")
    by_kind = ", ".join(f"{kind} {n}" for kind, n in summary.orphan_ledgers_by_kind.items() if n)
    if by_kind:
        table.add_row("  by kind", by_kind)
    table.add_row("orphan offloaded objects",
                  f"{summary.orphan_offloaded_objects} ({ui.size(summary.orphan_object_bytes)})")
    table.add_row("scanned", f"{summary.scanned_ledgers} ledgers, {summary.references} references, "
                             f"{summary.scanned_objects} objects")
    for location, why in outcome.refused_locations.items():
        table.add_row(ui.styled("not listed", "yellow"), f"{location}: {why}")
    if enqueued is not None:
        table.add_row("enqueued", str(enqueued["sent"]))
        for why, n in enqueued["skipped"].items():
            table.add_row(ui.styled("not enqueued", "yellow"), f"{n}: {why}")
    ui.show_table(table, opts.wide, console)
    for line in missing_lines(listed, summary.missing_ledgers):
        ui.say(console, line)
    if output is not None:
        ui.say(console, f"Report: {output / 'report.html'}")  # a path is never cut
    else:
        ui.say(console, "Add --output DIR for the Parquet tables and report.html.")
    if enqueued is None and summary.orphan_ledgers:
        ui.say(console, "Dry run: nothing was sent. Add --enqueue to have the daemon verify and delete them.")


#: Missing ledgers named in the output (a CronJob's log): the rest are in missing_ledgers.parquet.
MISSING_LOGGED = 20


def missing_lines(listed: Sequence[MissingLedger], total: int) -> list[str]:
    """One line per missing ledger (ledger id, what references it, the topic), then "and N more"."""
    lines = [f"missing ledger {m.ledger_id}: referenced as {m.kind} by {m.topic}"
             + (f" ({m.detail})" if m.detail else "") for m in listed]
    if total > len(listed):
        lines.append(f"… and {total - len(listed):,} more missing ledgers (all in missing_ledgers.parquet)")
    return lines
