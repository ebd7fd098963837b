"""``cursor reset`` and ``cursor health``: the cursor core for operators.

``reset --position L:E`` does what ``pulsar-admin topics reset-cursor`` does to
a cursor: read position = ``L:E``, mark-delete = ``L:E-1``, individual and
batch-index acks cleared.  It edits only cursors whose state lives in the
metadata store, only to a position inside a ledger the managed ledger still
lists, and writes the cursor node in one multi-op guarded by the managed-ledger
node's version, so it cannot race ``trim`` into a deleted ledger.  The write
moves the node's version, which is what a concurrent ``trim`` checks.  The
reset is observed like any epoch increase (``pulsar_cursor_epoch_increase_*``)
and its write is held to the persist budget.

``health`` lists the cursors whose persisted state is near or over the persist
budget, or lives in a cursor ledger (see :mod:`deletion_service.cursor.health`).
"""

from __future__ import annotations

import json
from typing import Annotated, assert_never

import typer
from rich.console import Console
from rich.table import Table

from deletion_service.cli import connections, known_names, options, settings, ui
from deletion_service.cursor import CursorError, health, parse_position, persistence
from deletion_service.cursor.ack_budget import PersistBudget
from deletion_service.cursor.epoch_metrics import AckStateMetrics, EpochMetrics
from deletion_service.cursor.reset import ResetOutcome, check_position, reset_in_memory, reset_stored_cursor
from deletion_service.errors import UsageError, UserError
from metastore.formats import (
    FormatError,
    Position,
    decode_managed_ledger,
    managed_ledger_path,
    parse_topic,
)
from metastore.formats.node_reader import MissingNodeError, read_decoded
from metastore.interface import MetadataStore

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


@app.command("reset", help="Move a subscription's read position (persists the cursor node). --position takes "
                            "LEDGER:ENTRY, earliest (the first listed ledger's first entry) or latest (after the "
                            "last entry the metadata records).")
def reset(
    ctx: typer.Context,
    topic: Annotated[str, typer.Option("--topic", "-t", help="persistent://tenant/ns/topic")],
    subscription: Annotated[str, typer.Option("--subscription", "-s", help="the subscription (cursor) name")],
    position: Annotated[str, typer.Option("--position", "-p", help="LEDGER:ENTRY, earliest or latest")],
    dry_run: Annotated[bool, typer.Option(help="show what the reset would do; write nothing")] = False,
) -> None:
    opts = options.get(ctx)
    name = options.topic(topic)
    if not subscription:
        raise UsageError("--subscription must not be empty")
    target = _explicit_position(position)
    config = settings.load(opts).config
    parsed = parse_topic(name)
    labels = (config.cluster_name, f"{parsed.tenant}/{parsed.namespace}", name, subscription)
    with connections.open_metadata_store(opts, config, must_exist=True) as store:
        try:
            if target is None:
                target = _named_position(store, name, position)
            if dry_run:
                outcome = preview_reset(store, name, subscription, target)
            else:
                outcome = reset_stored_cursor(store, name, subscription, target, observer=EpochMetrics(*labels),
                                              budget=PersistBudget.from_config(config),
                                              persist_observer=AckStateMetrics(*labels))
        except CursorError as e:
            raise UserError(str(e)) from e
    if opts.json:
        typer.echo(json.dumps({**outcome_json(outcome), **({"dryRun": True} if dry_run else {})}))
        return
    table = Table(title=f"cursor reset — {outcome.topic} / {outcome.subscription}" + (" (dry run)" if dry_run else ""))
    for column in ("previous read", "new read", "mark-delete", "epoch", "node version"):
        table.add_column(column)
    table.add_row(*(f"{p.ledger_id}:{p.entry_id}" for p in (outcome.previous, outcome.position, outcome.mark_delete)),
                  str(outcome.epoch), str(outcome.version) + (" (unchanged)" if dry_run else ""))
    ui.show_table(table, opts.wide)


def _explicit_position(text: str) -> Position | None:
    """``L:E`` parsed; None for earliest/latest (they need the ledger list); anything else a usage error."""
    if text.lower() in ("earliest", "latest"):
        return None
    try:
        return parse_position(text)
    except ValueError as e:
        raise UsageError(f"--position: {e}; or earliest, or latest") from e


def _named_position(store: MetadataStore, topic: str, which: str) -> Position:
    """earliest: the first listed ledger's entry 0; latest: after the last entry the last ledger records."""
    try:
        ml, _ = read_decoded(store, managed_ledger_path(topic), decode_managed_ledger, "managed-ledger")
    except MissingNodeError as e:
        raise UserError(f"no managed-ledger node for {topic} at {managed_ledger_path(topic)}") from e
    except FormatError as e:
        raise UserError(str(e)) from e
    if not ml.ledgers:
        raise UserError(f"the managed ledger of {topic} lists no ledgers: there is no {which.lower()} position")
    if which.lower() == "earliest":
        return Position(ml.ledgers[0].ledger_id, 0)
    last = ml.ledgers[-1]
    if last.entries is None:
        raise UserError(f"the metadata of {topic} does not record how many entries ledger {last.ledger_id} holds "
                        "(it is still open): give --position LEDGER:ENTRY")
    return Position(last.ledger_id, last.entries)


def preview_reset(store: MetadataStore, topic: str, subscription: str, target: Position) -> ResetOutcome:
    """What ``reset_stored_cursor`` would write, from the same reads and the same in-memory change,
    without the write: the node's version stays as read."""
    stored = persistence.load(store, topic, subscription)
    try:
        ml, _ = read_decoded(store, managed_ledger_path(topic), decode_managed_ledger, "managed-ledger")
    except (MissingNodeError, FormatError) as e:
        raise CursorError(f"cannot read the managed ledger of {topic}: {e}") from e
    check_position(ml, topic, target)
    cursor = persistence.to_cursor(stored)
    previous = cursor.read_position
    epoch = reset_in_memory(cursor, target)
    return ResetOutcome(topic, subscription, previous, cursor.read_position, cursor.mark_delete_position, epoch,
                        stored.version)


def health_json(rows: list[health.CursorHealth]) -> list[dict]:
    return [{"topic": r.topic, "subscription": r.subscription, "path": r.path, "status": r.status.value,
             "stateBytes": r.state_bytes, "nodeBytes": r.node_bytes, "budgetBytes": r.budget,
             "ranges": r.ranges, "batchEntries": r.batch_entries, "cursorsLedgerId": r.cursor_ledger,
             "detail": r.detail} for r in rows]


def _style(status: health.Status) -> str:
    match status:
        case health.Status.OVER:
            return "bold red"
        case health.Status.NEAR:
            return "yellow"
        case health.Status.CURSOR_LEDGER:
            return "cyan"
        case health.Status.UNDECODABLE:
            return "red"
        case health.Status.OK:
            return "green"
        case _:
            assert_never(status)


@app.command("health", help=(
    "List cursors whose persisted ack state is near (>= 80%) or over the persist budget "
    "(managedLedgerMaxAckStateInBytesToPersist, capped at the store's node limit), or lives in a "
    "BookKeeper cursor ledger this tool cannot read. Over budget means a broker restart redelivers "
    "acknowledged messages. Read-only."))
def health_command(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option(help="only this tenant's topics")] = None,
    namespace: Annotated[str | None, typer.Option(help="only this namespace's topics (TENANT/NAMESPACE)")] = None,
    all_cursors: Annotated[bool, typer.Option("--all", help="list healthy cursors too")] = False,
) -> None:
    opts = options.get(ctx)
    tenant, namespace = options.parse_scope(tenant, namespace)
    config = settings.load(opts).config
    with connections.open_metadata_store(opts, config, must_exist=True) as store:
        known_names.check_scope(store, tenant, namespace)
        rows = health.check(store, PersistBudget.from_config(config), tenant, namespace)
    shown = rows if all_cursors else [r for r in rows if r.status is not health.Status.OK]
    if opts.json:
        typer.echo(json.dumps({"checked": len(rows), "cursors": health_json(shown)}, indent=2))
        return
    if not shown:
        ui.say(Console(), ui.styled(f"all {len(rows)} cursors are within their persist budget", "green"))
        return
    table = Table(title=f"cursor health — {len(shown)} of {len(rows)} cursors")
    for column in ("topic", "subscription", "state", "budget", "used", "ranges", "status"):
        table.add_column(column, justify="right" if column in ("state", "budget", "used", "ranges") else "left")
    for r in shown:
        used = "—" if r.status in (health.Status.CURSOR_LEDGER, health.Status.UNDECODABLE) else f"{r.share:.0%}"
        status = r.status.value + (f" {r.cursor_ledger}" if r.cursor_ledger is not None else "")
        table.add_row(r.topic, r.subscription, f"{r.state_bytes:,} B", f"{r.budget:,} B", used,
                      f"{r.ranges:,}", ui.styled(status, _style(r.status)))
    ui.show_table(table, opts.wide)
