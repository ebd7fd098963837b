"""``inflight``: how many deletions are waiting, from the backlog of every partition and RETRY."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from deletion_service.broker.interface import BrokerError
from deletion_service.cli import options, settings
from deletion_service.cli.command_environment import open_environment
from deletion_service.errors import UserError
from deletion_service.inflight import BacklogSource, MetricsBacklog, ReceivedBacklog


def register(app: typer.Typer) -> None:
    app.command(help="Estimated in-flight deletions: backlog of every deletion partition plus RETRY.")(inflight)


def inflight(ctx: typer.Context, namespace: options.NamespaceOpt = None) -> None:
    opts = options.get(ctx)
    cfg = settings.load(opts).config
    with open_environment(opts, cfg, check_layout=False, read_only=True) as env:
        env.topics = options.scoped_topics(env.topics, namespace)
        source: BacklogSource = env.backlog
        if env.started_broker and isinstance(env.backlog, MetricsBacklog):
            source = ReceivedBacklog(env.broker)  # its metrics are not refreshed yet, and no daemon runs
        try:
            per_topic = source.backlog(env.topics.consumed, env.topics.subscription)
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
