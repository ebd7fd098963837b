"""``config show``: the effective configuration and where each value came from, secrets masked."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click
import typer
from rich.table import Table

from deletion_service.cli import connections, options, settings, ui
from deletion_service.config import SECRET_KEYS, LoadedConfig
from deletion_service.embedded.broker import EmbeddedBroker

#: Secrets that only ever come from the environment: shown as set, never shown.
SECRET_ENV = ("LEDGER_DELETION_METADATA_STORE_DIGEST", "LEDGER_DELETION_ADMIN_TOKEN")


def register(app: typer.Typer) -> None:
    config_app = typer.Typer(help="Configuration.", no_args_is_help=True)
    config_app.command(
        "show", help="The effective configuration and where each value came from; secrets masked.")(show)
    app.add_typer(config_app, name="config")


def show(ctx: typer.Context) -> None:
    opts = options.get(ctx)
    rows = config_rows(opts, settings.load(opts), ctx.find_root())
    if opts.json:  # each value with its source, as the table shows them
        typer.echo(json.dumps({k: {"value": v, "source": src} for k, v, src in rows}, indent=2, default=str))
        return
    table = Table(title="effective configuration")
    # A key is never cut (operators copy it into a file or --set); values and sources fold instead.
    table.add_column("key", no_wrap=True, min_width=max(len(k) for k, _, _ in rows))
    table.add_column("value", overflow="fold")
    table.add_column("source", overflow="fold")
    for key, value, source in rows:
        table.add_row(key, json.dumps(value, default=str), source)
    ui.show_table(table, opts.wide)


#: Connection options: (row name, CommonOptions attribute / root parameter name, env var).
CONNECTIONS = (("metadataStore", "metadata_store", "LEDGER_DELETION_METADATA_STORE"),
               ("bookkeeperMetadataStore", "bookkeeper_metadata_store", "LEDGER_DELETION_BOOKKEEPER_METADATA_STORE"),
               ("brokerUrl", "broker_url", "LEDGER_DELETION_BROKER_URL"),
               ("webServiceUrl", "web_service_url", "LEDGER_DELETION_WEB_SERVICE_URL"),
               ("dataDir", "data_dir", "LEDGER_DELETION_DATA_DIR"))


def config_rows(opts: options.CommonOptions, loaded: LoadedConfig,
                root: click.Context | None = None) -> list[tuple[str, Any, str]]:
    """(key, value, source) for every config key, then the connection options and env-only secrets.
    ``root``: the root command's context, which knows whether a connection option came from the
    command line, the environment or its default.

    Every value is the one in effect, never a placeholder: an option left out shows what the command
    would use instead (``bookkeeperMetadataStore`` follows ``--metadata-store``; the embedded store's
    URL; the embedded broker's address when it runs), and its source says why."""
    rows: list[tuple[str, Any, str]] = []
    for key, value in loaded.config.camel().items():
        source = loaded.source(key).label()
        if key in SECRET_KEYS and value is not None:
            value = f"{value} (file; contents not shown)"
        elif key == "offloadFileSystemBaseDir" and value is None and opts.embedded:
            value, source = str(connections.offload_settings(opts, loaded.config).filesystem_base_dir), \
                "default (embedded: under dataDir)"
        rows.append((key, value, source))
    for name, attr, env in CONNECTIONS:
        given = _option_source(root, attr, env)
        value, source = _in_effect(opts, attr, given)
        rows.append((name, value, source))
    for name in SECRET_ENV:
        if os.environ.get(name):
            rows.append((name, "****", "env"))
    return rows


def _in_effect(opts: options.CommonOptions, attr: str, given: str) -> tuple[Any, str]:
    """A connection option's value in effect, and its source."""
    value = getattr(opts, attr)
    if attr == "data_dir":
        return str(Path(value).absolute()), given
    if value is not None:
        return str(value), given
    match attr:
        case "metadata_store":
            return connections.store_url(opts), "default (embedded: SQLite in dataDir)"
        case "bookkeeper_metadata_store":
            return connections.store_url(opts, bookkeeper=True), (
                "default (metadataStore)" if opts.metadata_store else "default (embedded: SQLite in dataDir)")
        case "broker_url":
            return _embedded_broker(opts)
        case _:
            return None, given


def _embedded_broker(opts: options.CommonOptions) -> tuple[str | None, str]:
    """The embedded broker's service URL while it runs; else none (a command starts one when it needs it)."""
    broker = EmbeddedBroker(opts.data_dir)
    info = broker.read_info()
    if info is not None and broker.is_ours_and_alive(info):
        return info.serviceUrl, f"default (embedded broker, pid {info.pid})"
    return None, f"default (embedded broker under {Path(opts.data_dir).absolute() / 'broker'}, started on demand)"


def _option_source(root: click.Context | None, param: str, env: str) -> str:
    source = root.get_parameter_source(param) if root is not None else None
    name = getattr(source, "name", "")
    return {"COMMANDLINE": "flag", "ENVIRONMENT": f"env {env}"}.get(name, "default")
