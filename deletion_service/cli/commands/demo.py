"""``demo``: a full embedded run on generated data, with live progress and a summary."""

from __future__ import annotations

import json
import logging
import time

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from deletion_service import demo as demo_mod
from deletion_service.cli import options, settings
from deletion_service.cli.command_environment import open_environment
from deletion_service.cluster_writer import ClusterWriter
from deletion_service.service import LedgerDeletionService


def register(app: typer.Typer) -> None:
    @app.command(help="A full embedded run on generated data: build a small cluster, trim, enqueue orphans, "
                      "delete — with live progress and a summary (under a minute).")
    def demo(ctx: typer.Context) -> None:
        opts = options.get(ctx)
        if not opts.debug:  # the summary says what each WARNING would; keep the screen for the progress bar
            logging.getLogger("deletion_service").setLevel(logging.ERROR)
        console = Console(stderr=opts.json)
        started = time.monotonic()
        # Shorter retries than production, so the ledger that never closes reaches the DLQ in seconds.
        cfg = settings.load(opts).config.model_copy(update={
            "two_phase_deletion_reconsume_later_in_seconds": 2, "two_phase_deletion_max_retry_delete_count": 2})
        with open_environment(opts, cfg, own_broker=True) as env:
            service = LedgerDeletionService(cfg, env.store, env.broker, env.bk_store, env.offload)
            settled: list = []
            last_deletion = [0.0]

            def on_settled(s) -> None:  # noqa: ANN001
                settled.append(s)
                if s.outcome.value == "deleted":
                    last_deletion[0] = time.monotonic()

            worker = service.start(on_settled=on_settled)
            try:
                run_id = str(int(time.time()))
                writer = ClusterWriter(env.store, env.bk_store, cfg.bookkeeper_ledgers_root_path)
                with console.status("building a cluster: topics, cursors, schemas, offloads, orphans…"):
                    assert env.offload.filesystem_base_dir is not None
                    plan = demo_mod.build(service, writer, env.offload.filesystem_base_dir, run_id)
                with console.status("phase one: trim every topic, enqueue orphans and manual requests…"):
                    demo_mod.mark(service, plan)
                progress = Progress(TextColumn("phase two: deleting"), BarColumn(), MofNCompleteColumn(),
                                    TimeElapsedColumn(), console=console, disable=opts.json)
                phase_two = time.monotonic()
                with progress:
                    task = progress.add_task("delete", total=plan.expected_endings)
                    deadline = time.monotonic() + 45
                    while time.monotonic() < deadline:
                        done = sum(demo_mod.tally(settled, plan.namespace).values())
                        progress.update(task, completed=done)
                        if done >= plan.expected_endings:
                            break
                        worker.run_once(0.2)
            finally:
                service.close()
        elapsed = time.monotonic() - started
        deleting = max(last_deletion[0] - phase_two, 1e-3)
        counts = demo_mod.tally(settled, plan.namespace)
        deleted = counts["deleted ledger"] + counts["deleted offloaded copy"]
        summary = {
            "deleted ledgers": counts["deleted ledger"], "deleted offloaded copies": counts["deleted offloaded copy"],
            "already absent": counts["absent"], "still in use": counts["still_in_use"],
            "metadata mismatch (not deleted)": counts["metadata_mismatch"], "dead-lettered": counts["dlq"],
            "waiting (too young)": plan.waiting, "removed by trim": plan.trimmed,
            "elapsed s": round(elapsed, 1), "deleting s": round(deleting, 1),
            "deletions/s": round(deleted / deleting, 1),
        }
        if opts.json:
            typer.echo(json.dumps(summary))
            return
        table = Table(title=f"ledger-deletion demo — namespace {plan.namespace}", show_header=False)
        for k, v in summary.items():
            table.add_row(k, str(v))
        console.print(table)
        console.print(f"Data under {opts.data_dir.absolute()}. Try: ledger-deletion dlq list   ·   "
                      "ledger-deletion inflight   ·   ledger-deletion run --exit-when-idle")
