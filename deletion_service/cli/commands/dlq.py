"""``dlq list | requeue | purge``: the dead-letter queue of deletion requests.

``list`` reads without taking anything (see :mod:`deletion_service.dlq.operations`); ``purge`` and
``requeue`` act on the requests a selection names — message ids as ``list`` prints them, or
``--reason``/``--older-than``, or ``--all`` — among those parked when the command starts.
Without ``--namespace`` each reads every DLQ a daemon serves (:mod:`deletion_service.protocol.scope`).
``list`` shows a parked request's reason, last error and attempts only when the daemon sealed them on
its DLQ copy; any other parked message (a producer's own) is listed as ``unsealed``, none of its words
printed, and may be selected, requeued and purged like the rest.
A requeue sends a request back to the topic it was parked from, and never sends back by filter
a refusal retrying cannot change (``cross-namespace``, ``invalid-request``, ``cannot-verify``).
Each request a purge drops or a requeue sends back gets an audit record (who, which, when:
:mod:`deletion_service.audit.operator_actions`) before it leaves the DLQ.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Annotated, TypeVar

import typer
from rich.table import Table

from deletion_service.audit import operator_actions
from deletion_service.broker.publisher import RequestPublisher
from deletion_service.cli import options, settings, ui
from deletion_service.cli.command_environment import CommandEnvironment, open_environment
from deletion_service.clock_text import rfc3339
from deletion_service.dlq import operations as dlq_mod
from deletion_service.dlq.marker import MarkerKey
from deletion_service.dlq.reasons import unknown_reason
from deletion_service.errors import UsageError, UserError
from deletion_service.orphans.scan_options import parse_duration
from deletion_service.protocol.scope import everything_served
from deletion_service.protocol.topics import DeletionTopics
from metastore.interface import MetadataStoreError

IdsArg = Annotated[list[str] | None, typer.Argument(
    metavar="[MESSAGE_ID]...", help="ids as 'dlq list' prints them (LEDGER:ENTRY)", show_default=False)]
ReasonOpt = Annotated[str | None, typer.Option("--reason", "-r", help="only requests parked for this reason")]
OlderOpt = Annotated[str | None, typer.Option(
    "--older-than", metavar="DURATION", help="only requests parked longer ago than this (90m, 6h, 2d)")]
AllOpt = Annotated[bool, typer.Option("--all", help="every request parked now (nothing that arrives later)")]


def register(app: typer.Typer) -> None:
    dlq_app = typer.Typer(help="The dead-letter queue of deletion requests.", no_args_is_help=True)
    dlq_app.command("list", help="Show parked requests and why. Reads only: takes nothing from anyone.")(list_parked)
    dlq_app.command("requeue", help="Republish the selected parked requests with a fresh retry budget to the "
                                    "topic each was parked from, then ack them. Select by MESSAGE_ID, --reason, "
                                    "--older-than or --all; cross-namespace, invalid-request and cannot-verify "
                                    "requests go back only when named by MESSAGE_ID.")(requeue)
    dlq_app.command("purge", help="Drop the selected parked requests (ack them); their ledgers are NOT deleted. "
                                  "Select by MESSAGE_ID, --reason, --older-than or --all.")(purge)
    app.add_typer(dlq_app, name="dlq")


def selection(ids: list[str] | None, reason: str | None, older_than: str | None, everything: bool,
              required: bool = True) -> dlq_mod.Selection:
    """The operator's selection, checked before anything connects."""
    try:
        age_s = parse_duration(older_than) if older_than is not None else None
    except UsageError:
        raise UsageError(f"--older-than expects a duration like 90m, 6h or 2d, got {older_than!r}") from None
    if everything and (ids or reason or older_than):
        raise UsageError("--all selects every parked request: give it alone, or select by id or filter instead")
    if reason is not None and (why := unknown_reason(reason)) is not None:
        raise UsageError(f"--reason: {why}")
    chosen = dlq_mod.Selection(frozenset(ids or ()), reason,
                               int((time.time() - age_s) * 1000) if age_s is not None else None, everything)
    if required and chosen.empty:
        raise UsageError("say which requests: MESSAGE_ID... (as 'dlq list' prints them), --reason, --older-than, "
                         "or --all")
    return chosen


def list_parked(
    ctx: typer.Context,
    limit: Annotated[int | None, typer.Option(min=0, help="at most this many (oldest first)")] = None,
    reason: ReasonOpt = None,
    older_than: OlderOpt = None,
    namespace: options.NamespaceOpt = None,
) -> None:
    opts = options.get(ctx)
    chosen = selection(None, reason, older_than, everything=False, required=False)
    cfg = settings.load(opts).config
    with open_environment(opts, cfg, check_layout=False, request_topics=False, read_only=True) as env:
        entries = dlq_mod.list_dlq(env.broker, scope(env, namespace), MarkerKey.read(env.store), limit,
                                   None if chosen.empty else chosen)
    if opts.json:
        typer.echo(json.dumps([entry_json(e) for e in entries], indent=2))
        return
    ui.show_table(parked_table(entries), opts.wide)
    unsealed = sum(not e.sealed for e in entries)
    if unsealed:
        typer.echo(f"{unsealed} request(s) were not parked under the daemon's seal (a producer's own message, or an "
                   "older daemon's copy): why is not known, so no reason or error of theirs is shown")


def entry_json(entry: dlq_mod.DlqEntry) -> dict:
    """A parked request as ``dlq list --json`` prints it: its moment as RFC 3339 in UTC, as every moment
    in the CLI's JSON (the request itself is the wire format, ``markedAt`` in epoch ms)."""
    out = entry.to_json()
    if isinstance(out.get("publishedAt"), int):
        out["publishedAt"] = rfc3339(out["publishedAt"])
    return out


def parked_table(entries: list[dlq_mod.DlqEntry]) -> Table:
    """One row per parked request, every value whole: ids, ledger and topic as typed back, the time
    in UTC; the free-text last error comes last, so the columns before it stay aligned."""
    table = Table(title=f"{len(entries)} request(s) in the DLQ")
    for col in ("message id", "ledger", "type", "topic", "reason", "attempts", "parked at (UTC)", "last error"):
        table.add_column(col, justify="right" if col in ("ledger", "attempts") else "left")
    for e in entries:
        r = e.request
        ledger, kind, topic = ((str(r.get("ledgerId")), str(r.get("ledgerType")), str(r.get("topicName")))
                               if r else ("-", "-", None))
        shown = topic if topic is not None else ui.styled("(undecodable payload)", "red")
        table.add_row(e.message_id, ledger, kind, shown, e.reason or "-", str(e.attempts), ui.utc(e.published_ms),
                      e.last_error or "-")
    return table


def requeue(ctx: typer.Context, ids: IdsArg = None, reason: ReasonOpt = None, older_than: OlderOpt = None,
            everything: AllOpt = False,
            namespace: options.NamespaceOpt = None) -> None:
    opts = options.get(ctx)
    chosen = selection(ids, reason, older_than, everything)
    cfg = settings.load(opts).config
    with open_environment(opts, cfg, check_layout=False) as env:
        where = scope(env, namespace)
        key = _writer_key(env)
        publisher = RequestPublisher(env.broker, env.topics)
        try:
            record = operator_actions.recorder(cfg, opts.data_dir, env.broker, operator_actions.REQUEUED)
            with ui.progress(not opts.json) as bar:
                task = bar.add_task("requeueing", total=None)
                done = _recorded(lambda: _unknown_ids_are_errors(lambda: dlq_mod.requeue(
                    env.broker, where, key, publisher, chosen, progress=lambda n: bar.update(task, completed=n),
                    record=record)), "requeued")
        finally:
            publisher.close()
    moved, kept, refused = done.moved, done.undecodable, done.refused
    if opts.json:
        typer.echo(json.dumps({"requeued": len(moved), "messageIds": [e.message_id for e in moved],
                               "keptUndecodable": len(kept), "keptRefused": [e.message_id for e in refused]}))
        return
    typer.echo(f"requeued {len(moved)} request(s)"
               + (f"; {len(kept)} undecodable payload(s) stay in the DLQ (purge them)" if kept else ""))
    if refused:
        reasons = ", ".join(sorted({e.reason or "(none)" for e in refused}))
        typer.echo(f"{len(refused)} request(s) stay parked: retrying cannot change their refusal ({reasons}); "
                   "name one by MESSAGE_ID to send it back to its own topic, where it is decided again")


def purge(ctx: typer.Context, ids: IdsArg = None, reason: ReasonOpt = None, older_than: OlderOpt = None,
          everything: AllOpt = False,
          yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
          namespace: options.NamespaceOpt = None) -> None:
    opts = options.get(ctx)
    chosen = selection(ids, reason, older_than, everything)
    cfg = settings.load(opts).config
    with open_environment(opts, cfg, check_layout=False, request_topics=False) as env:
        where = scope(env, namespace)
        key = _writer_key(env)
        listed = _unknown_ids_are_errors(lambda: dlq_mod.list_dlq(env.broker, where, key, selection=chosen))
        missing = sorted(chosen.message_ids - {e.message_id for e in listed})
        if missing:
            raise UserError(str(dlq_mod.UnknownMessageIds(missing)))
        if listed and not yes and not sys.stdin.isatty():
            raise UsageError(f"dlq purge would drop {len(listed)} request(s) and asks first, but no terminal answers: "
                             "give --yes to drop them without asking")
        if listed and not yes and not typer.confirm(
                f"Drop {len(listed)} request(s) from the DLQ? Their ledgers stay where they are", err=True):
            raise typer.Abort()
        # exactly the requests just shown to the operator, by id
        exact = dlq_mod.Selection(frozenset(e.message_id for e in listed))
        record = operator_actions.recorder(cfg, opts.data_dir, env.broker, operator_actions.PURGED)
        dropped = _recorded(lambda: _unknown_ids_are_errors(lambda: dlq_mod.purge(
            env.broker, where, key, exact, record=record)), "purged") if listed else []
    if opts.json:
        typer.echo(json.dumps({"purged": len(dropped), "messageIds": [e.message_id for e in dropped]}))
    else:
        typer.echo(f"purged {len(dropped)} request(s)")


def scope(env: CommandEnvironment, namespace: str | None) -> list[DeletionTopics]:
    """``--namespace``'s own DLQ, or every DLQ a daemon serves."""
    if namespace is not None:
        return [options.scoped_topics(env.topics, namespace)]
    try:
        return everything_served(env.config, env.store, env.topics)
    except MetadataStoreError as e:
        raise UserError(f"cannot list the namespaces to read: {e} (or give --namespace)") from e


def _writer_key(env: CommandEnvironment) -> MarkerKey:
    """The marker key, created if missing: purge and requeue must be able to record what they settle."""
    try:
        return MarkerKey.ensure(env.store)
    except MetadataStoreError as e:
        raise UserError(f"cannot record settlements: {e}; nothing was changed") from e


T = TypeVar("T")


def _unknown_ids_are_errors(action: Callable[[], T]) -> T:
    """Named ids that are not parked (someone else settled them meanwhile) are the operator's to see."""
    try:
        return action()
    except dlq_mod.UnknownMessageIds as e:
        raise UserError(str(e)) from e


def _recorded(action: Callable[[], T], what: str) -> T:
    """A purge or requeue whose audit records cannot be written acks nothing: the operator is told why."""
    try:
        return action()
    except operator_actions.NotRecorded as e:
        sent = ("; the requests already sent back stay parked as well (the daemon takes a repeated request "
                "as it takes any): requeue them again once the trail can be written") if what == "requeued" else ""
        raise UserError(f"nothing left the DLQ: {e}{sent}") from e
