"""``inflight``: how many deletions are waiting, from the backlog of every partition and RETRY."""

from __future__ import annotations

import json
import time

import typer
from rich.console import Console
from rich.table import Table

from deletion_service.broker.interface import BrokerError
from deletion_service.cli import options, settings
from deletion_service.cli.command_environment import CommandEnvironment, open_environment
from deletion_service.errors import UserError
from deletion_service.inflight import MetricsBacklog


def register(app: typer.Typer) -> None:
    app.command(help="Estimated in-flight deletions: backlog of every deletion partition plus RETRY.")(inflight)


def inflight(ctx: typer.Context) -> None:
    opts = options.get(ctx)
    cfg = settings.load(opts).config
    with open_environment(opts, cfg, check_layout=False) as env:
        if env.started_broker and isinstance(env.backlog, MetricsBacklog):
            _warm_up(env)
        try:
            per_topic = env.backlog.backlog(env.topics.consumed, env.topics.subscription)
        except BrokerError as e:
            raise UserError(str(e)) from e
    total = sum(per_topic.values())
    if opts.json:
        typer.echo(json.dumps({"estimatedInflight": total, "byTopic": per_topic}))
        return
    table = Table(title=f"estimated in-flight deletions: {total}")
    table.add_column("topic")
    table.add_column("backlog", justify="right")
    for topic, n in per_topic.items():
        table.add_row(topic, str(n))
    Console().print(table)


def _warm_up(env: CommandEnvironment, refresh_s: float = 11.0) -> None:
    """A broker this command just started has not loaded the deletion topics, so its
    metrics say 0: load them (touch each subscription), then wait one metrics refresh."""
    for topic in env.topics.consumed:
        env.broker.ensure_subscription(topic, env.topics.subscription)
    with Console(stderr=True).status("reading the embedded broker's backlog (its metrics refresh every ~10 s)…"):
        time.sleep(refresh_s)
