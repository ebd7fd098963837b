"""``demo``: a full embedded run on generated data, with live progress and a summary."""

from __future__ import annotations

import json
import logging
import shlex
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from deletion_service import demo as demo_mod
from deletion_service.audit.writer import daemon_writer
from deletion_service.cli import options, settings, ui
from deletion_service.cli.command_environment import open_environment
from deletion_service.clock_text import local_moment, rfc3339
from deletion_service.cluster_writer import ClusterWriter
from deletion_service.daemon.leak_watch import watcher_role
from deletion_service.delete_phase.consumer.worker import Settled
from deletion_service.embedded.broker import EmbeddedBroker
from deletion_service.errors import UserError
from deletion_service.leak_watcher.role import WatcherRole
from deletion_service.service import LedgerDeletionService

#: The demo's settle delay: a stock broker's own delete is over by then.
LEAK_SETTLE_S = 1

#: The summary's rows: (camelCase key for --json, label for people).
SUMMARY_ROWS = (
    ("deletedLedgers", "deleted ledgers"), ("deletedOffloadedCopies", "deleted offloaded copies"),
    ("alreadyAbsent", "already absent"), ("stillInUse", "still in use"),
    ("metadataMismatch", "metadata mismatch (not deleted)"), ("deadLettered", "dead-lettered"),
    ("waitingTooYoung", "waiting (too young)"), ("removedByTrim", "removed by trim"),
    ("leaksCaught", "leaked by a one-phase broker, caught and deleted"),
    ("elapsedSeconds", "elapsed s"), ("deletingSeconds", "deleting s"), ("deletionsPerSecond", "deletions/s"),
)


def register(app: typer.Typer) -> None:
    @app.command(help="A full embedded run on generated data: build a small cluster, trim, enqueue orphans, "
                      "delete — with live progress and a summary (under a minute).")
    def demo(ctx: typer.Context) -> None:
        opts = options.get(ctx)
        if not opts.debug:  # the summary says what each WARNING would; keep the screen for the progress bar
            logging.getLogger("deletion_service").setLevel(logging.ERROR)
        console = Console(stderr=opts.json)
        started = time.monotonic()
        stage = ["starting"]
        try:
            plan, settled, phase_two, last_deletion, stamped = _run(opts, console, stage)
        except KeyboardInterrupt:
            raise UserError(_interrupted(opts, stage[0]), exit_code=130) from None
        summary = _summary(plan, settled, time.monotonic() - started, max(last_deletion - phase_two, 1e-3))
        waiting_until = _waiting_until(stamped, plan.namespace)
        if opts.json:
            typer.echo(json.dumps({**summary, "waitingUntil": None if waiting_until is None
                                   else rfc3339(int(waiting_until * 1000))}))
            return
        table = Table(title=f"ledger-deletion demo — namespace {plan.namespace}", show_header=False)
        for key, label in SUMMARY_ROWS:
            table.add_row(label, str(summary[key]))
        ui.show_table(table, opts.wide, console)
        _next_steps(console, opts, plan.waiting, waiting_until)


#: What to try after the demo: each finishes in seconds (a bare ``run --exit-when-idle`` would wait a day
#: for the young requests, silently).
NEXT_STEPS = (
    ("audit --limit 10", "the last records of the audit trail: what was deleted, and the evidence"),
    ("dlq list", "the parked requests, and why each was parked"),
    ("inflight", "what still waits in the deletion topics"),
    ("run --exit-when-idle --max-wait 15", "a daemon for 15 s: exits 3, naming what waits and until when"),
)


def _next_steps(console: Console, opts: options.CommonOptions, waiting: int, until: float | None) -> None:
    if waiting and until is not None:
        ui.say(console, f"{waiting} request(s) wait in RETRY until {local_moment(until)}: their ledgers are "
                        "younger than minLedgerAgeSeconds; a running daemon (`run`) deletes them then.")
    where = f"ledger-deletion --data-dir {shlex.quote(str(Path(opts.data_dir).absolute()))}"
    ui.say(console, f"Data under {Path(opts.data_dir).absolute()}. Try (each finishes in seconds):")
    for hint, what in NEXT_STEPS:
        ui.say(console, f"  {where} {hint}")
        ui.say(console, f"      {what}")


def _waiting_until(settled: list, namespace: str) -> float | None:
    """When the last of this run's requests still waiting in RETRY falls due (Unix seconds), if any waits:
    a request whose last ending was "reconsumed", plus the delay it was given then."""
    last: dict[int, tuple[float, Settled]] = {}
    for at, s in settled:
        if s.request is not None and s.request.topic_name.startswith(f"persistent://{namespace}/"):
            last[s.request.ledger_id] = (at, s)
    dues = [at + s.action.delay_s for at, s in last.values() if s.outcome.value == "reconsumed"]
    return max(dues) if dues else None


def _interrupted(opts: options.CommonOptions, stage: str) -> str:
    """Ctrl-C: what was left where, in one line."""
    data = Path(opts.data_dir).absolute()
    broker = EmbeddedBroker(data)
    info = broker.read_info()
    if info is not None and broker.is_ours_and_alive(info):  # interrupted before it was ours to stop
        left = f"its embedded broker (pid {info.pid}) still runs, the next command reuses it"
    else:
        left = "its embedded broker was stopped"
    return (f"interrupted while {stage}: {left}; what was built and queued so far stays under {data} (finish "
            f"with: ledger-deletion --data-dir {shlex.quote(str(data))} run --exit-when-idle; or remove that "
            "directory)")


def _run(opts: options.CommonOptions, console: Console, stage: list[str]) -> tuple:
    """Build, mark, delete; returns (plan, settled requests, phase-two start, last deletion time, the settled
    requests with when each was settled).
    ``stage[0]`` names what is under way, for the Ctrl-C message."""
    # Shorter retries than production, so the ledger that never closes reaches the DLQ in seconds; and a short
    # settle delay, so the leak watcher catches the stock broker's leak within the run.
    cfg = settings.load(opts).config.model_copy(update={
        "two_phase_deletion_reconsume_later_in_seconds": 2, "two_phase_deletion_max_retry_delete_count": 2,
        "ledger_deletion_leak_watcher_settle_seconds": LEAK_SETTLE_S})
    with open_environment(opts, cfg, own_broker=True) as env:
        audit = daemon_writer(cfg, opts.data_dir, env.broker)  # the demo's deletions are audited like the daemon's
        service = LedgerDeletionService(cfg, env.store, env.broker, env.bk_store, env.offload, audit=audit)
        settled: list = []
        stamped: list = []  # (when, settled): when each waiting request falls due
        last_deletion = [0.0]

        def on_settled(s) -> None:  # noqa: ANN001
            settled.append(s)
            stamped.append((time.time(), s))
            if s.outcome.value == "deleted":
                last_deletion[0] = time.monotonic()

        worker = service.start(on_settled=on_settled)
        watcher = watcher_role(service)
        try:
            run_id = str(int(time.time()))
            writer = ClusterWriter(env.store, env.bk_store, cfg.bookkeeper_ledgers_root_path)
            stage[0] = "building the demo cluster"
            with console.status("building a cluster: topics, cursors, schemas, offloads, orphans…"):
                assert env.offload.filesystem_base_dir is not None
                plan = demo_mod.build(service, writer, env.offload.filesystem_base_dir, run_id)
                if watcher is not None:
                    watcher.tick()  # the leak watcher's first look at the cluster
                demo_mod.one_phase_delete(writer, plan)
            stage[0] = "sending deletion requests (phase one)"
            with console.status("phase one: trim every topic, enqueue orphans and manual requests…"):
                demo_mod.mark(service, plan)
            stage[0] = "deleting (phase two)"
            phase_two = time.monotonic()
            _delete(opts, console, plan, settled, worker)
            if watcher is not None:
                stage[0] = "watching for leaks"
                _catch_leak(console, opts, watcher, plan, settled, worker)
        finally:
            if watcher is not None:
                watcher.stop()
            service.close()
            audit.close()
    return plan, settled, phase_two, last_deletion[0], stamped


def _delete(opts: options.CommonOptions, console: Console, plan, settled: list, worker) -> None:  # noqa: ANN001
    # a bar on a terminal; piped (a log, `| cat`), one plain line once phase two ends
    progress = Progress(TextColumn("phase two: deleting"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=console, disable=opts.json or not console.is_terminal)
    started = time.monotonic()
    done = 0
    with progress:
        task = progress.add_task("delete", total=plan.expected_endings)
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            done = sum(demo_mod.tally(settled, plan.namespace).values())
            progress.update(task, completed=done)
            if done >= plan.expected_endings:
                break
            worker.run_once(0.2)
    if not opts.json and not console.is_terminal:
        ui.say(console, f"phase two: {done} of {plan.expected_endings} requests settled in "
                        f"{time.monotonic() - started:.1f} s")


def _catch_leak(console: Console, opts: options.CommonOptions, watcher: WatcherRole, plan, settled: list,  # noqa: ANN001
                worker) -> None:  # noqa: ANN001
    """The leak watcher's passes until the stock broker's leak is requested and deleted (or 20 s)."""
    with console.status("the leak watcher: a stock broker's failed delete, caught after the settle delay…"):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and demo_mod.leaks_caught(settled, plan) < len(plan.leaked):
            if watcher.tick() is None:
                break  # another daemon watches this cluster: it catches the leak, not the demo
            until = time.monotonic() + 0.5
            while time.monotonic() < until:
                worker.run_once(0.1)


def _summary(plan, settled: list, elapsed: float, deleting: float) -> dict:  # noqa: ANN001
    counts = demo_mod.tally(settled, plan.namespace)
    deleted = counts["deleted ledger"] + counts["deleted offloaded copy"]
    values = (counts["deleted ledger"], counts["deleted offloaded copy"], counts["absent"], counts["still_in_use"],
              counts["metadata_mismatch"], counts["dlq"], plan.waiting, plan.trimmed,
              demo_mod.leaks_caught(settled, plan), round(elapsed, 1),
              round(deleting, 1), round(deleted / deleting, 1))
    return {key: value for (key, _), value in zip(SUMMARY_ROWS, values, strict=True)}
