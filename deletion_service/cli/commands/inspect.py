"""``inspect``: decode a Pulsar or BookKeeper metadata node from a store or a file.

Read-only and safe next to live brokers.  Every decoding problem becomes one
line naming where the bytes came from, so an operator can tell "wrong path"
from "corrupt node" without a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from deletion_service.cli import connections, options, settings
from deletion_service.cli.commands import inspect_render
from deletion_service.cursor.ack_budget import PersistBudget
from deletion_service.errors import UsageError, UserError
from metastore.formats import (
    FormatError,
    LedgerLayout,
    decode_cursor,
    decode_ledger_metadata,
    decode_managed_ledger,
    ledger_path,
)
from metastore.interface import DEFAULT_MAX_REQUEST_BYTES

app = typer.Typer(help="Decode Pulsar and BookKeeper metadata nodes (read-only).", no_args_is_help=True)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="inspect")

PathOpt = Annotated[str | None, typer.Option("--path", help="node path in the metadata store")]
FileOpt = Annotated[Path | None, typer.Option("--file", help="a file holding the node's raw bytes")]


def _read(
    opts: options.CommonOptions, path: str | None, file: Path | None, bookkeeper: bool
) -> tuple[bytes, str, int | None]:
    """The raw bytes, a description of their source, and the znode ctime when read from a store."""
    if (path is None) == (file is None):
        raise UsageError("give exactly one of --path (read from the metadata store) or --file")
    if file is not None:
        try:
            return file.read_bytes(), f"file {file}", None
        except OSError as e:
            raise UserError(f"cannot read {file}: {e.strerror}") from e
    assert path is not None
    with connections.open_metadata_store(opts, settings.load(opts).config, bookkeeper=bookkeeper,
                                          must_exist=True) as store:
        try:
            node = store.get(path)
        except ValueError as e:
            raise UsageError(str(e)) from e
    if node is None:
        raise UserError(f"no node at {path} in {connections.store_url(opts, bookkeeper)}")
    return node.data, f"node {path}", node.ctime_ms


def _show(opts: options.CommonOptions, what: str, data: bytes, source: str, decode: Callable[[bytes], Any],
          as_json: Callable[[Any], dict], tables: Callable[[Any, str], list]) -> None:
    try:
        decoded = decode(data)
    except FormatError as e:
        raise UserError(f"cannot decode {source} as {what}: {e}") from e
    if opts.json:
        typer.echo(json.dumps(as_json(decoded), indent=2))
        return
    console = Console()
    for table in tables(decoded, f"{what} — {source}"):
        console.print(table)


@app.command("managed-ledger", help="A managed ledger's ledger list, offload state and properties.")
def managed_ledger(ctx: typer.Context, path: PathOpt = None, file: FileOpt = None) -> None:
    opts = options.get(ctx)
    data, source, _ = _read(opts, path, file, bookkeeper=False)
    _show(opts, "managed-ledger", data, source, decode_managed_ledger,
          inspect_render.managed_ledger_json, inspect_render.managed_ledger_table)


@app.command(help="A cursor's mark-delete position, acked ranges and batch-index acks, and the size of "
                  "its ack state against the persist budget (managedLedgerMaxAckStateInBytesToPersist).")
def cursor(ctx: typer.Context, path: PathOpt = None, file: FileOpt = None) -> None:
    opts = options.get(ctx)
    data, source, _ = _read(opts, path, file, bookkeeper=False)
    # The budget a store's write is held to: capped at its request limit (a file is judged the same way).
    budget = PersistBudget.from_config(settings.load(opts).config).capped(DEFAULT_MAX_REQUEST_BYTES).max_bytes
    _show(opts, "cursor", data, source, decode_cursor, lambda i: inspect_render.cursor_json(i, budget),
          lambda i, title: inspect_render.cursor_table(i, title, budget))


@app.command("bk-ledger", help="A BookKeeper ledger's metadata (read from --bookkeeper-metadata-store).")
def bk_ledger(ctx: typer.Context, path: PathOpt = None, file: FileOpt = None) -> None:
    opts = options.get(ctx)
    data, source, ctime = _read(opts, path, file, bookkeeper=True)
    _show(opts, "bk-ledger", data, source, decode_ledger_metadata,
          lambda m: inspect_render.bk_ledger_json(m, ctime),
          lambda m, title: inspect_render.bk_ledger_table(m, title, ctime))


class LayoutChoice(StrEnum):
    hierarchical = "hierarchical"
    long = "long"


@app.command("bk-path", help="The znode path of a ledger id (hierarchical layout unless --layout long).")
def bk_path(
    ledger_id: Annotated[int, typer.Argument(help="ledger id, 0 … 2^63-1")],
    layout: Annotated[LayoutChoice, typer.Option(help="the cluster's ledger manager layout")] = (
        LayoutChoice.hierarchical),
    root: Annotated[str, typer.Option(help="BookKeeper's ledgers root znode")] = "/ledgers",
) -> None:
    chosen = LedgerLayout.HIERARCHICAL if layout == LayoutChoice.hierarchical else LedgerLayout.LONG_HIERARCHICAL
    try:
        typer.echo(ledger_path(root, ledger_id, chosen))
    except (FormatError, ValueError) as e:
        raise UsageError(f"cannot compute a path for ledger {ledger_id}: {e}") from e
