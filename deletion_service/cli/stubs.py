"""Subcommands of the CLI contract that are declared but not built yet.

They are registered with their contract options so ``--help`` already teaches
the whole tool; calling one exits 1 naming the issue that builds it.  Each
issue that builds a command moves it out of here into its own module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from deletion_service.errors import NotBuiltYet


def register(app: typer.Typer) -> None:
    @app.command(help="The daemon: delete-phase workers, admin HTTP API and /metrics.")
    def run(
        exit_when_idle: Annotated[bool, typer.Option(help="exit 0 once nothing is in flight")] = False,
        max_wait: Annotated[float | None, typer.Option(help="with --exit-when-idle: exit 3 after S seconds")] = None,
        admin_address: Annotated[str, typer.Option(help="HOST:PORT of the admin API and /metrics")] = "127.0.0.1:8090",
        dry_run: Annotated[bool, typer.Option(help="verify and report, delete nothing")] = False,
    ) -> None:
        raise NotBuiltYet("run", 6)

    @app.command(help="Estimated in-flight deletions (backlog of the deletion topics).")
    def inflight() -> None:
        raise NotBuiltYet("inflight", 6)

    dlq_app = typer.Typer(help="The dead-letter queue of deletion requests.", no_args_is_help=True)

    @dlq_app.command("list", help="Read DLQ messages without acking them.")
    def dlq_list() -> None:
        raise NotBuiltYet("dlq list", 6)

    @dlq_app.command("requeue", help="Republish DLQ messages to the deletion topic, then ack them.")
    def dlq_requeue() -> None:
        raise NotBuiltYet("dlq requeue", 6)

    @dlq_app.command("purge", help="Ack (drop) every DLQ message.")
    def dlq_purge() -> None:
        raise NotBuiltYet("dlq purge", 6)

    app.add_typer(dlq_app, name="dlq")

    @app.command("scan-orphans", help="Find orphan ledgers at cluster scale with Spark (dry-run unless --enqueue).")
    def scan_orphans(
        output: Annotated[Path | None, typer.Option(help="directory for parquet files and report.html")] = None,
        min_age: Annotated[str, typer.Option(help="ignore ledgers younger than this, e.g. 1d, 6h")] = "1d",
        enqueue: Annotated[bool, typer.Option(help="send orphan ledgers to the deletion topic")] = False,
        spark_master: Annotated[str, typer.Option(help="Spark master URL")] = "local[*]",
        snapshot: Annotated[Path | None, typer.Option(help="read a metadata snapshot instead of the store")] = None,
    ) -> None:
        raise NotBuiltYet("scan-orphans")

    config_app = typer.Typer(help="Configuration.", no_args_is_help=True)

    @config_app.command("show", help="Effective configuration, secrets masked.")
    def config_show() -> None:
        raise NotBuiltYet("config show", 6)

    app.add_typer(config_app, name="config")
