"""``inflight``: how many deletion requests are in flight, and whether some wait for a consumer that
does not process them.

Without ``--namespace``: of every topic a daemon serves (each namespace's too, in namespace scope).
The figure is :func:`deletion_service.inflight.read_in_flight`'s, the one the admin route and the
``estimated_inflight`` gauge give."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from deletion_service.broker.interface import BrokerError
from deletion_service.cli import options, settings, ui
from deletion_service.cli.command_environment import CommandEnvironment, open_environment
from deletion_service.cli.known_names import check_scope
from deletion_service.errors import UserError
from deletion_service.inflight import (
    UNDELIVERED_AFTER_S,
    UNDELIVERED_REMEDY,
    InFlight,
    MetricsBacklog,
    Undelivered,
    read_in_flight,
    undelivered,
)
from deletion_service.protocol.scope import consumed, everything_served
from deletion_service.protocol.topics import DeletionTopics
from metastore.interface import MetadataStoreError

HELP = ("Requests in flight: the deletion requests on every request partition and RETRY that subscription "
        "ledger-deletion has not acknowledged, as the broker counts its backlog (Pulsar's msgBacklog; pulsar-lite "
        "also counts requests acknowledged after the oldest one that is not, and refreshes every ~10 s). The admin "
        "route /admin/v2/broker-stats/estimated-inflight-deletion-ledger-count and the estimated_inflight gauge "
        "give the same figure. Also says which requests a consumer was handed and neither acknowledged nor "
        f"followed with anything for {UNDELIVERED_AFTER_S:.0f} s (stranded), and what to do.")

def register(app: typer.Typer) -> None:
    app.command(help=HELP)(inflight)


def inflight(ctx: typer.Context, namespace: options.NamespaceOpt = None) -> None:
    opts = options.get(ctx)
    cfg = settings.load(opts).config
    with open_environment(opts, cfg, check_layout=False, read_only=True) as env:
        if namespace is not None:  # a typo must not read (and subscribe to) a namespace nobody has: "0" says nothing
            check_scope(env.store, None, namespace)
        where = ([options.scoped_topics(env.topics, namespace)] if namespace is not None
                 else _everything(env))
        try:
            if env.started_broker and isinstance(env.backlog, MetricsBacklog):
                _warm(env, where)
            reading = read_in_flight(env.backlog, where)
        except BrokerError as e:
            raise UserError(str(e)) from e
    stranded = undelivered(reading.reading)
    if opts.json:
        typer.echo(json.dumps({"estimatedInflight": reading.total, "byTopic": reading.by_topic,
                               "undelivered": stranded.total, "undeliveredByTopic": stranded.by_topic}))
        return
    _table(reading, stranded, opts.wide)


def _warm(env: CommandEnvironment, where: list[DeletionTopics]) -> None:
    """A broker this command just started counts nothing until it loads the topics and refreshes its statistics
    (~5-10 s): load them, then wait for the broker to count them, so the figure is the one a daemon would read."""
    topics = consumed(where)
    for topic in topics:
        env.broker.ensure_subscription(topic, env.topics.subscription)
    env.broker.consumer(topics, env.topics.subscription, receiver_queue_size=1).close()  # loads every topic
    assert isinstance(env.backlog, MetricsBacklog)
    env.backlog.wait_counted(topics)


def _table(reading: InFlight, stranded: Undelivered, wide: bool) -> None:
    console = Console()
    table = Table(title=f"requests in flight: {reading.total}")
    table.add_column("topic")
    table.add_column("in flight", justify="right")
    for topic, n in reading.by_topic.items():
        table.add_row(topic, str(n))
    ui.show_table(table, wide, console)
    if stranded.total:
        quiet = max(stranded.quiet_s.values())
        ui.say(console, f"{stranded.total} request(s) were handed to a consumer that has neither acknowledged them "
                        f"nor been delivered anything for {quiet:.0f} s ({', '.join(sorted(stranded.by_topic))}): "
                        f"{UNDELIVERED_REMEDY}")


def _everything(env: CommandEnvironment) -> list[DeletionTopics]:
    """Unscoped: every request and RETRY topic a daemon serves (each namespace's too, in namespace scope)."""
    try:
        return everything_served(env.config, env.store, env.topics)
    except MetadataStoreError as e:
        raise UserError(f"cannot list the namespaces to read: {e} (or give --namespace)") from e
