"""``dlq list | requeue | purge``: the dead-letter queue of deletion requests."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from deletion_service import dlq as dlq_mod
from deletion_service.cli import options, settings, ui
from deletion_service.cli.command_environment import open_environment
from deletion_service.publisher import RequestPublisher


def register(app: typer.Typer) -> None:
    dlq_app = typer.Typer(help="The dead-letter queue of deletion requests.", no_args_is_help=True)
    dlq_app.command("list", help="Show parked requests and why, without acking them.")(list_parked)
    dlq_app.command("requeue", help="Republish parked requests with a fresh retry budget, then ack them.")(requeue)
    dlq_app.command(
        "purge", help="Drop every parked request (ack them). Their ledgers are NOT deleted.")(purge)
    app.add_typer(dlq_app, name="dlq")


def list_parked(ctx: typer.Context,
                limit: Annotated[int | None, typer.Option(help="at most this many")] = None) -> None:
    opts = options.get(ctx)
    cfg = settings.load(opts).config
    with open_environment(opts, cfg, check_layout=False, request_topics=False) as env:
        entries = dlq_mod.list_dlq(env.broker, env.topics, limit)
    if opts.json:
        typer.echo(json.dumps([e.to_json() for e in entries], indent=2))
        return
    table = Table(title=f"{len(entries)} request(s) in the DLQ")
    for col in ("request", "reason", "last error", "attempts", "parked at"):
        table.add_column(col)
    for e in entries:
        what = (f"{e.request['ledgerType']} {e.request['ledgerId']} of {e.request['topicName']}"
                if e.request else "[red]undecodable payload")
        parked = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.published_ms / 1000))
        table.add_row(what, e.reason, e.last_error[:80], str(e.attempts), parked)
    Console().print(table)


def requeue(ctx: typer.Context) -> None:
    opts = options.get(ctx)
    cfg = settings.load(opts).config
    with open_environment(opts, cfg, check_layout=False) as env:
        publisher = RequestPublisher(env.broker, env.topics)
        try:
            with ui.progress(not opts.json) as bar:
                task = bar.add_task("requeueing", total=None)
                moved, kept = dlq_mod.requeue(env.broker, env.topics, publisher,
                                              progress=lambda n: bar.update(task, completed=n))
        finally:
            publisher.close()
    if opts.json:
        typer.echo(json.dumps({"requeued": len(moved), "keptUndecodable": len(kept)}))
    else:
        typer.echo(f"requeued {len(moved)} request(s)"
                   + (f"; {len(kept)} undecodable payload(s) stay in the DLQ (purge them)" if kept else ""))


def purge(ctx: typer.Context,
          yes: Annotated[bool, typer.Option("--yes", help="do not ask for confirmation")] = False) -> None:
    opts = options.get(ctx)
    if not yes and not typer.confirm("Drop every request in the DLQ? Their ledgers stay where they are"):
        raise typer.Abort()
    cfg = settings.load(opts).config
    with open_environment(opts, cfg, check_layout=False, request_topics=False) as env:
        dropped = dlq_mod.purge(env.broker, env.topics)
    if opts.json:
        typer.echo(json.dumps({"purged": len(dropped)}))
    else:
        typer.echo(f"purged {len(dropped)} request(s)")
