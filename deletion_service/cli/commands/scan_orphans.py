"""``scan-orphans``: declared with its contract options but not built yet.

Registered so ``--help`` already teaches the whole tool; calling it exits 1
saying so.  The PySpark orphan pipeline (its own issue) builds it here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from deletion_service.errors import NotBuiltYet


def register(app: typer.Typer) -> None:
    @app.command("scan-orphans", help="Find orphan ledgers at cluster scale with Spark (dry-run unless --enqueue).")
    def scan_orphans(
        output: Annotated[Path | None, typer.Option(help="directory for parquet files and report.html")] = None,
        min_age: Annotated[str, typer.Option(help="ignore ledgers younger than this, e.g. 1d, 6h")] = "1d",
        enqueue: Annotated[bool, typer.Option(help="send orphan ledgers to the deletion topic")] = False,
        spark_master: Annotated[str, typer.Option(help="Spark master URL")] = "local[*]",
        snapshot: Annotated[Path | None, typer.Option(help="read a metadata snapshot instead of the store")] = None,
    ) -> None:
        raise NotBuiltYet("scan-orphans")
