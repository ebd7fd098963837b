"""``dlq list | requeue | purge``: the dead-letter queue of deletion requests.

``list`` reads without taking anything (see :mod:`deletion_service.dlq`); ``purge`` and
``requeue`` act on the requests a selection names — message ids as ``list`` prints them, or
``--reason``/``--older-than``, or ``--all`` — among those parked when the command starts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Annotated, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from deletion_service import dlq as dlq_mod
from deletion_service.cli import options, settings, ui
from deletion_service.cli.command_environment import open_environment
from deletion_service.errors import UsageError, UserError
from deletion_service.orphans.scan_options import parse_duration
from deletion_service.publisher import RequestPublisher

IdsArg = Annotated[list[str] | None, typer.Argument(
    metavar="[MESSAGE_ID]...", help="ids as 'dlq list' prints them (LEDGER:ENTRY)", show_default=False)]
ReasonOpt = Annotated[str | None, typer.Option("--reason", "-r", help="only requests parked for this reason")]
OlderOpt = Annotated[str | None, typer.Option(
    "--older-than", metavar="DURATION", help="only requests parked longer ago than this (90m, 6h, 2d)")]
AllOpt = Annotated[bool, typer.Option("--all", help="every request parked now (nothing that arrives later)")]


def register(app: typer.Typer) -> None:
    dlq_app = typer.Typer(help="The dead-letter queue of deletion requests.", no_args_is_help=True)
    dlq_app.command("list", help="Show parked requests and why. Reads only: takes nothing from anyone.")(list_parked)
    dlq_app.command("requeue", help="Republish the selected parked requests with a fresh retry budget, then ack "
                                    "them. Select by MESSAGE_ID, --reason, --older-than or --all.")(requeue)
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
        env.topics = options.scoped_topics(env.topics, namespace)
        entries = dlq_mod.list_dlq(env.broker, env.topics, limit, None if chosen.empty else chosen)
    if opts.json:
        typer.echo(json.dumps([e.to_json() for e in entries], indent=2))
        return
    table = Table(title=f"{len(entries)} request(s) in the DLQ")
    for col in ("message id", "request", "reason", "last error", "attempts", "parked at"):
        table.add_column(col, no_wrap=col in ("message id", "reason"))
    for e in entries:
        what = (f"{e.request['ledgerType']} {e.request['ledgerId']} of {e.request['topicName']}"
                if e.request else "[red]undecodable payload")
        parked = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.published_ms / 1000))
        table.add_row(e.message_id, what, e.reason, e.last_error[:80], str(e.attempts), parked)
    Console().print(table)


def requeue(ctx: typer.Context, ids: IdsArg = None, reason: ReasonOpt = None, older_than: OlderOpt = None,
            everything: AllOpt = False,
            namespace: options.NamespaceOpt = None) -> None:
    opts = options.get(ctx)
    chosen = selection(ids, reason, older_than, everything)
    cfg = settings.load(opts).config
    with open_environment(opts, cfg, check_layout=False) as env:
        env.topics = options.scoped_topics(env.topics, namespace)
        publisher = RequestPublisher(env.broker, env.topics,
                                     namespace_scope=cfg.ledger_deletion_topic_scope == "namespace")
        try:
            with ui.progress(not opts.json) as bar:
                task = bar.add_task("requeueing", total=None)
                moved, kept = _unknown_ids_are_errors(lambda: dlq_mod.requeue(
                    env.broker, env.topics, publisher, chosen, progress=lambda n: bar.update(task, completed=n)))
        finally:
            publisher.close()
    if opts.json:
        typer.echo(json.dumps({"requeued": len(moved), "messageIds": [e.message_id for e in moved],
                               "keptUndecodable": len(kept)}))
    else:
        typer.echo(f"requeued {len(moved)} request(s)"
                   + (f"; {len(kept)} undecodable payload(s) stay in the DLQ (purge them)" if kept else ""))


def purge(ctx: typer.Context, ids: IdsArg = None, reason: ReasonOpt = None, older_than: OlderOpt = None,
          everything: AllOpt = False,
          yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
          namespace: options.NamespaceOpt = None) -> None:
    opts = options.get(ctx)
    chosen = selection(ids, reason, older_than, everything)
    cfg = settings.load(opts).config
    with open_environment(opts, cfg, check_layout=False, request_topics=False) as env:
        env.topics = options.scoped_topics(env.topics, namespace)
        listed = _unknown_ids_are_errors(lambda: dlq_mod.list_dlq(env.broker, env.topics, selection=chosen))
        missing = sorted(chosen.message_ids - {e.message_id for e in listed})
        if missing:
            raise UserError(str(dlq_mod.UnknownMessageIds(missing)))
        if listed and not yes and not typer.confirm(
                f"Drop {len(listed)} request(s) from the DLQ? Their ledgers stay where they are", err=True):
            raise typer.Abort()
        # exactly the requests just shown to the operator, by id
        exact = dlq_mod.Selection(frozenset(e.message_id for e in listed))
        dropped = _unknown_ids_are_errors(lambda: dlq_mod.purge(env.broker, env.topics, exact)) if listed else []
    if opts.json:
        typer.echo(json.dumps({"purged": len(dropped), "messageIds": [e.message_id for e in dropped]}))
    else:
        typer.echo(f"purged {len(dropped)} request(s)")


T = TypeVar("T")


def _unknown_ids_are_errors(action: Callable[[], T]) -> T:
    """Named ids that are not parked (someone else settled them meanwhile) are the operator's to see."""
    try:
        return action()
    except dlq_mod.UnknownMessageIds as e:
        raise UserError(str(e)) from e
