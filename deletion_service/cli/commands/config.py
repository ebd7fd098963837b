"""``config show``: the effective configuration and where each value came from, secrets masked."""

from __future__ import annotations

import json
import os
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from deletion_service.cli import options, settings
from deletion_service.config import SECRET_KEYS, LoadedConfig

#: Secrets that only ever come from the environment: shown as set, never shown.
SECRET_ENV = ("LEDGER_DELETION_METADATA_STORE_DIGEST", "LEDGER_DELETION_ADMIN_TOKEN")


def register(app: typer.Typer) -> None:
    config_app = typer.Typer(help="Configuration.", no_args_is_help=True)
    config_app.command(
        "show", help="The effective configuration and where each value came from; secrets masked.")(show)
    app.add_typer(config_app, name="config")


def show(ctx: typer.Context) -> None:
    opts = options.get(ctx)
    rows = config_rows(opts, settings.load(opts))
    if opts.json:
        typer.echo(json.dumps({k: v for k, v, _ in rows}, indent=2, default=str))
        return
    table = Table(title="effective configuration")
    for col in ("key", "value", "source"):
        table.add_column(col)
    for key, value, source in rows:
        table.add_row(key, json.dumps(value, default=str), source)
    Console().print(table)


def config_rows(opts: options.CommonOptions, loaded: LoadedConfig) -> list[tuple[str, Any, str]]:
    """(key, value, source) for every config key, then the connection options and env-only secrets."""
    rows: list[tuple[str, Any, str]] = []
    for key, value in loaded.config.camel().items():
        if key in SECRET_KEYS and value is not None:
            value = f"{value} (file; contents not shown)"
        rows.append((key, value, loaded.source(key).label()))
    for name, value in (("metadataStore", opts.metadata_store), ("bookkeeperMetadataStore",
                        opts.bookkeeper_metadata_store), ("brokerUrl", opts.broker_url),
                        ("webServiceUrl", opts.web_service_url), ("dataDir", str(opts.data_dir))):
        rows.append((name, value if value is not None else "(embedded)", "option/env"))
    for name in SECRET_ENV:
        if os.environ.get(name):
            rows.append((name, "****", "env"))
    return rows
