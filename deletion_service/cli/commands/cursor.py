"""``cursor reset``: an occasional read position change through the cursor core, persisted.

``reset --position L:E`` does what ``pulsar-admin topics reset-cursor`` does to
a cursor: read position = ``L:E``, mark-delete = ``L:E-1``, individual and
batch-index acks cleared.  It edits only cursors whose state lives in the
metadata store, only to a position inside a ledger the managed ledger still
lists, and writes the cursor node in one multi-op guarded by the managed-ledger
node's version, so it cannot race ``trim`` into a deleted ledger.  The write
moves the node's version, which is what a concurrent ``trim`` checks.

"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from deletion_service.cli import connections, options, settings
from deletion_service.cursor import CursorError, parse_position
from deletion_service.cursor.reset import ResetOutcome, reset_stored_cursor
from deletion_service.errors import UsageError, UserError
from metastore.formats import Position, parse_topic

app = typer.Typer(help="Cursor operations through the cursor core.", no_args_is_help=True)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="cursor")


def _pos(p: Position) -> dict[str, int]:
    return {"ledgerId": p.ledger_id, "entryId": p.entry_id}


def outcome_json(outcome: ResetOutcome) -> dict:
    return {
        "topic": outcome.topic,
        "subscription": outcome.subscription,
        "previous": _pos(outcome.previous),
        "position": _pos(outcome.position),
        "epoch": outcome.epoch,
        "version": outcome.version,
    }


@app.command("reset", help="Move a subscription's read position (persists the cursor node).")
def reset(
    ctx: typer.Context,
    topic: Annotated[str, typer.Option(help="persistent://tenant/ns/topic")],
    subscription: Annotated[str, typer.Option(help="the subscription (cursor) name")],
    position: Annotated[str, typer.Option(help="LEDGER:ENTRY to read from next")],
) -> None:
    opts = options.get(ctx)
    try:
        target = parse_position(position)
        topic_name = str(parse_topic(topic))
    except ValueError as e:
        raise UsageError(str(e)) from e
    if not subscription:
        raise UsageError("--subscription must not be empty")
    with connections.open_metadata_store(opts, settings.load(opts).config, must_exist=True) as store:
        try:
            outcome = reset_stored_cursor(store, topic_name, subscription, target)
        except CursorError as e:
            raise UserError(str(e)) from e
    if opts.json:
        typer.echo(json.dumps(outcome_json(outcome)))
        return
    table = Table(title=f"cursor reset — {outcome.topic} / {outcome.subscription}")
    for column in ("previous read", "new read", "mark-delete", "epoch", "node version"):
        table.add_column(column)
    table.add_row(*(f"{p.ledger_id}:{p.entry_id}" for p in (outcome.previous, outcome.position, outcome.mark_delete)),
                  str(outcome.epoch), str(outcome.version))
    Console().print(table)
