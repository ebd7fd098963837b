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
from typing import Annotated, Any, assert_never

import typer

from deletion_service.cli import connections, options, settings, ui
from deletion_service.cli.commands import inspect_render
from deletion_service.cursor.ack_budget import PersistBudget
from deletion_service.errors import UsageError, UserError
from metastore.formats import (
    FormatError,
    LedgerLayout,
    ManagedLedgerInfo,
    cursor_path,
    decode_cursor,
    decode_ledger_metadata,
    decode_managed_ledger,
    ledger_path,
    managed_ledger_path,
    read_layout,
)
from metastore.interface import DEFAULT_MAX_REQUEST_BYTES

app = typer.Typer(help="Decode Pulsar and BookKeeper metadata nodes (read-only).", no_args_is_help=True)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="inspect")

PathOpt = Annotated[str | None, typer.Option("--path", help="node path in the metadata store")]
FileOpt = Annotated[Path | None, typer.Option("--file", help="a file holding the node's raw bytes")]
TopicOpt = Annotated[str | None, typer.Option("--topic", "-t", help="the topic whose node to read (instead of --path)")]
SubscriptionOpt = Annotated[str | None, typer.Option("--subscription", "-s", help="with --topic: the cursor's name")]


def _node_path(path: str | None, topic: str | None, subscription: str | None = None,
               cursor: bool = False) -> str | None:
    """``--topic`` (and ``--subscription`` for a cursor) spelled as the node path Pulsar uses."""
    if topic is None:
        if subscription is not None:
            raise UsageError("--subscription goes with --topic")
        return path
    if path is not None:
        raise UsageError("give --topic or --path, not both")
    name = options.topic(topic)
    if not cursor:
        return managed_ledger_path(name)
    if not subscription:
        raise UsageError("inspect cursor --topic needs --subscription (the cursor's name)")
    return cursor_path(name, subscription)


def _read(
    opts: options.CommonOptions, path: str | None, file: Path | None, bookkeeper: bool
) -> tuple[bytes, str, int | None]:
    """The raw bytes, a description of their source, and the znode ctime when read from a store."""
    if (path is None) == (file is None):
        raise UsageError("give exactly one of --path or --topic (read from the metadata store), or --file")
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
    if not data:
        raise UserError(f"{source} is empty: there is nothing to decode as {what} (check the path)")
    try:
        decoded = decode(data)
    except FormatError as e:
        raise UserError(f"cannot decode {source} as {what}: {e}") from e
    if isinstance(decoded, ManagedLedgerInfo) and not (
            decoded.ledgers or decoded.properties or decoded.terminated_position):
        # protobuf keeps fields it does not know: a cursor node "decodes" into an empty ledger list
        raise UserError(f"{source} does not decode as {what}: none of its fields are a managed ledger's "
                        "(a cursor or another kind of node?)")
    if opts.json:
        typer.echo(json.dumps(as_json(decoded), indent=2))
        return
    for table in tables(decoded, f"{what} — {source}"):
        ui.show_table(table, opts.wide)


@app.command("managed-ledger", help="A managed ledger's ledger list, offload state and properties.")
def managed_ledger(ctx: typer.Context, path: PathOpt = None, file: FileOpt = None, topic: TopicOpt = None) -> None:
    opts = options.get(ctx)
    data, source, _ = _read(opts, _node_path(path, topic), file, bookkeeper=False)
    _show(opts, "managed-ledger", data, source, decode_managed_ledger,
          inspect_render.managed_ledger_json, inspect_render.managed_ledger_table)


@app.command(help="A cursor's mark-delete position, acked ranges and batch-index acks, and the size of "
                  "its ack state against the persist budget (managedLedgerMaxAckStateInBytesToPersist).")
def cursor(ctx: typer.Context, path: PathOpt = None, file: FileOpt = None, topic: TopicOpt = None,
           subscription: SubscriptionOpt = None) -> None:
    opts = options.get(ctx)
    data, source, _ = _read(opts, _node_path(path, topic, subscription, cursor=True), file, bookkeeper=False)
    # The budget a store's write is held to: capped at its request limit (a file is judged the same way).
    budget = PersistBudget.from_config(settings.load(opts).config).capped(DEFAULT_MAX_REQUEST_BYTES).max_bytes
    _show(opts, "cursor", data, source, decode_cursor, lambda i: inspect_render.cursor_json(i, budget),
          lambda i, title: inspect_render.cursor_table(i, title, budget))


@app.command("bk-ledger", help="A BookKeeper ledger's metadata (read from --bookkeeper-metadata-store): by "
                               "LEDGER_ID (its path from the store's LAYOUT), --path or --file.")
def bk_ledger(
    ctx: typer.Context,
    ledger_id: Annotated[int | None, typer.Argument(min=0, help="the ledger id", show_default=False)] = None,
    path: PathOpt = None, file: FileOpt = None,
    root: Annotated[str | None, typer.Option(help="BookKeeper's ledgers root; default: bookkeeperLedgersRootPath")]
    = None,
) -> None:
    opts = options.get(ctx)
    if ledger_id is not None:
        if path is not None or file is not None:
            raise UsageError("give LEDGER_ID, --path or --file: one of them")
        path = _ledger_znode(opts, ledger_id, root)
    data, source, ctime = _read(opts, path, file, bookkeeper=True)
    _show(opts, "bk-ledger", data, source, decode_ledger_metadata,
          lambda m: inspect_render.bk_ledger_json(m, ctime),
          lambda m, title: inspect_render.bk_ledger_table(m, title, ctime))


class LayoutChoice(StrEnum):
    hierarchical = "hierarchical"
    long = "long"

    def ledger_layout(self) -> LedgerLayout:
        match self:
            case LayoutChoice.hierarchical:
                return LedgerLayout.HIERARCHICAL
            case LayoutChoice.long:
                return LedgerLayout.LONG_HIERARCHICAL
            case _:
                assert_never(self)


def _ledger_znode(opts: options.CommonOptions, ledger_id: int, root: str | None) -> str:
    """The ledger's path through the layout its BookKeeper metadata store records (``<root>/LAYOUT``)."""
    config = settings.load(opts).config
    root = root or config.bookkeeper_ledgers_root_path
    with connections.open_metadata_store(opts, config, bookkeeper=True, must_exist=True) as store:
        try:
            layout = read_layout(store, root)
        except FormatError as e:
            raise UserError(f"cannot find ledger {ledger_id}: {e} (check --bookkeeper-metadata-store and "
                            "--root)") from e
    try:
        return ledger_path(root, ledger_id, layout)
    except (FormatError, ValueError) as e:
        raise UsageError(f"cannot compute a path for ledger {ledger_id}: {e}") from e


@app.command("bk-path", help="The znode path of a ledger id (hierarchical layout unless --layout long).")
def bk_path(
    ctx: typer.Context,
    ledger_id: Annotated[int, typer.Argument(help="ledger id, 0 … 2^63-1")],
    layout: Annotated[LayoutChoice, typer.Option(help="the cluster's ledger manager layout")] = (
        LayoutChoice.hierarchical),
    root: Annotated[str, typer.Option(help="BookKeeper's ledgers root znode")] = "/ledgers",
) -> None:
    try:
        path = ledger_path(root, ledger_id, layout.ledger_layout())
    except (FormatError, ValueError) as e:
        raise UsageError(f"cannot compute a path for ledger {ledger_id}: {e}") from e
    if options.get(ctx).json:
        typer.echo(json.dumps({"ledgerId": ledger_id, "path": path, "layout": layout.value, "root": root}))
    else:
        typer.echo(path)
