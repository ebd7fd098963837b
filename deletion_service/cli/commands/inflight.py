"""``inflight``: how many deletions are waiting, from the backlog of every partition and RETRY.

Without ``--namespace``: of every topic a daemon serves (each namespace's too, in namespace scope)."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from deletion_service.broker.interface import BrokerError
from deletion_service.cli import options, settings
from deletion_service.cli.command_environment import CommandEnvironment, open_environment
from deletion_service.cli.known_names import check_scope
from deletion_service.errors import UserError
from deletion_service.inflight import BacklogSource, MetricsBacklog, ReceivedBacklog
from deletion_service.protocol.scope import consumed, everything_served
from deletion_service.protocol.topics import DeletionTopics
from metastore.interface import MetadataStoreError


def register(app: typer.Typer) -> None:
    app.command(help="Estimated in-flight deletions: backlog of every deletion partition plus RETRY.")(inflight)


def inflight(ctx: typer.Context, namespace: options.NamespaceOpt = None) -> None:
    opts = options.get(ctx)
    cfg = settings.load(opts).config
    with open_environment(opts, cfg, check_layout=False, read_only=True) as env:
        if namespace is not None:  # a typo must not read (and subscribe to) a namespace nobody has: "0" says nothing
            check_scope(env.store, None, namespace)
        where = ([options.scoped_topics(env.topics, namespace)] if namespace is not None
                 else _everything(env))
        source: BacklogSource = env.backlog
        if env.started_broker and isinstance(env.backlog, MetricsBacklog):
            source = ReceivedBacklog(env.broker)  # its metrics are not refreshed yet, and no daemon runs
        try:
            per_topic = source.backlog(consumed(where), env.topics.subscription)
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


def _everything(env: CommandEnvironment) -> list[DeletionTopics]:
    """Unscoped: every request and RETRY topic a daemon serves (each namespace's too, in namespace scope)."""
    try:
        return everything_served(env.config, env.store, env.topics)
    except MetadataStoreError as e:
        raise UserError(f"cannot list the namespaces to read: {e} (or give --namespace)") from e
