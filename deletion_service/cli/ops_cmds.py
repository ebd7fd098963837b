"""Operator commands: ``inflight``, ``dlq list|requeue|purge``, ``config show``."""

from __future__ import annotations

import json
import os
import time
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from deletion_service import dlq as dlq_mod
from deletion_service.broker.interface import BrokerError
from deletion_service.cli import context, runtime, ui
from deletion_service.cli.environment import Environment, open_environment
from deletion_service.config import SECRET_KEYS, DeletionConfig, env_name
from deletion_service.errors import UserError
from deletion_service.inflight import MetricsBacklog
from deletion_service.publisher import RequestPublisher

SECRET_ENV = ("LEDGER_DELETION_METADATA_STORE_DIGEST", "LEDGER_DELETION_ADMIN_TOKEN")


def register(app: typer.Typer) -> None:
    @app.command(help="Estimated in-flight deletions: backlog of every deletion partition plus RETRY.")
    def inflight(ctx: typer.Context) -> None:
        opts = context.get(ctx)
        cfg = runtime.config(opts)
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

    dlq_app = typer.Typer(help="The dead-letter queue of deletion requests.", no_args_is_help=True)

    @dlq_app.command("list", help="Show parked requests and why, without acking them.")
    def dlq_list(ctx: typer.Context,
                 limit: Annotated[int | None, typer.Option(help="at most this many")] = None) -> None:
        opts = context.get(ctx)
        cfg = runtime.config(opts)
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

    @dlq_app.command("requeue", help="Republish parked requests with a fresh retry budget, then ack them.")
    def dlq_requeue(ctx: typer.Context) -> None:
        opts = context.get(ctx)
        cfg = runtime.config(opts)
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

    @dlq_app.command("purge", help="Drop every parked request (ack them). Their ledgers are NOT deleted.")
    def dlq_purge(ctx: typer.Context,
                  yes: Annotated[bool, typer.Option("--yes", help="do not ask for confirmation")] = False) -> None:
        opts = context.get(ctx)
        if not yes and not typer.confirm("Drop every request in the DLQ? Their ledgers stay where they are"):
            raise typer.Abort()
        cfg = runtime.config(opts)
        with open_environment(opts, cfg, check_layout=False, request_topics=False) as env:
            dropped = dlq_mod.purge(env.broker, env.topics)
        if opts.json:
            typer.echo(json.dumps({"purged": len(dropped)}))
        else:
            typer.echo(f"purged {len(dropped)} request(s)")

    app.add_typer(dlq_app, name="dlq")

    config_app = typer.Typer(help="Configuration.", no_args_is_help=True)

    @config_app.command("show", help="The effective configuration and where each value came from; secrets masked.")
    def config_show(ctx: typer.Context) -> None:
        opts = context.get(ctx)
        cfg = runtime.config(opts)
        rows = _config_rows(opts, cfg)
        if opts.json:
            typer.echo(json.dumps({k: v for k, v, _ in rows}, indent=2, default=str))
            return
        table = Table(title="effective configuration")
        for col in ("key", "value", "source"):
            table.add_column(col)
        for key, value, source in rows:
            table.add_row(key, json.dumps(value, default=str), source)
        Console().print(table)

    app.add_typer(config_app, name="config")


def _config_rows(opts: context.CliContext, cfg: DeletionConfig) -> list[tuple[str, Any, str]]:
    file_keys = set()
    if opts.config is not None:
        import tomllib

        file_keys = set(tomllib.loads(opts.config.read_text()))
    rows: list[tuple[str, Any, str]] = []
    flags = runtime.overrides(opts)
    for key, value in cfg.camel().items():
        source = ("--set" if key in flags else "env " + env_name(key) if env_name(key) in os.environ
                  else f"file {opts.config}" if key in file_keys else "default")
        if key in SECRET_KEYS and value is not None:
            value = f"{value} (file; contents not shown)"
        rows.append((key, value, source))
    for name, value in (("metadataStore", opts.metadata_store), ("bookkeeperMetadataStore",
                        opts.bookkeeper_metadata_store), ("brokerUrl", opts.broker_url),
                        ("webServiceUrl", opts.web_service_url), ("dataDir", str(opts.data_dir))):
        rows.append((name, value if value is not None else "(embedded)", "option/env"))
    for name in SECRET_ENV:
        if os.environ.get(name):
            rows.append((name, "****", "env"))
    return rows


def _warm_up(env: Environment, refresh_s: float = 11.0) -> None:
    """A broker this command just started has not loaded the deletion topics, so its
    metrics say 0: load them (touch each subscription), then wait one metrics refresh."""
    for topic in env.topics.consumed:
        env.broker.ensure_subscription(topic, env.topics.subscription)
    with Console(stderr=True).status("reading the embedded broker's backlog (its metrics refresh every ~10 s)…"):
        time.sleep(refresh_s)
