"""``status``: ask a running daemon what it is doing (its ``/status``), as tables or ``--json``."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from deletion_service.cli import options, ui
from deletion_service.clock_text import local_moment
from deletion_service.embedded import daemon_record
from deletion_service.errors import UserError


def register(app: typer.Typer) -> None:
    app.command(help="What a running daemon has in hand, what waits and until when, its last warnings and "
                     "errors, and whether its dependencies answer (reads the daemon's /status).")(status)


#: Where a daemon listens when neither --admin-address nor the data dir's record says.
DEFAULT_ADDRESS = "127.0.0.1:8090"


def fetch(address: str, timeout_s: float = 5.0, why_here: str = "") -> dict[str, Any]:
    url = f"http://{address}/status"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return json.loads(r.read())
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise UserError(f"no daemon answers at {url} ({reason}){why_here}; is `ledger-deletion run` running? "
                        "Give its --admin-address, or the --data-dir it runs on") from e


def admin_address_of(opts: options.CommonOptions, given: str | None) -> tuple[str, str, bool]:
    """The daemon to ask, and why there: ``--admin-address``; else the address the data dir's daemon
    recorded beside its lock (any port); else the default, saying why the record was not used (none,
    or a stale one whose pid no longer runs: its port may be another program's by now).  The third value:
    a stale record was ignored (a daemon that answers at the default is then said not to be the record's)."""
    if given is not None:
        return given, "", False
    found = daemon_record.find(opts.data_dir)
    if found.record is not None:
        return found.record.admin_address, f" (recorded by {found.note})", False
    return DEFAULT_ADDRESS, f" (the default: {found.note})", daemon_record.path_of(opts.data_dir).exists()


def status(
    ctx: typer.Context,
    admin_address: Annotated[str | None, typer.Option(
        help="HOST:PORT of the daemon's admin API [default: where the --data-dir's daemon recorded it listens, "
             f"else {DEFAULT_ADDRESS}]", show_default=False)] = None,
) -> None:
    opts = options.get(ctx)
    admin_address, why_here, stale = admin_address_of(opts, admin_address)
    answer = fetch(admin_address, why_here=why_here)
    if stale:
        ui.warn(f"answered by the daemon at the default {admin_address}{why_here}", opts.json)
    if opts.json:
        typer.echo(json.dumps(answer, indent=2))
        return
    console = Console()
    hand = Table(title=f"ledger-deletion at {admin_address}", show_header=False)
    in_hand = answer.get("inHand", {})
    for key, value in in_hand.items():
        if key != "heldBy":
            hand.add_row(key, "—" if value is None else str(value))
    ui.show_table(hand, opts.wide, console)
    if in_hand.get("heldBy"):
        ui.show_table(_held_table(in_hand["heldBy"]), opts.wide, console)
    ui.say(console, _watcher_line(answer.get("leakWatcher") or {}))
    ui.say(console, undelivered_line(answer.get("undelivered") or {}))
    deps = Table(title="dependencies")
    deps.add_column("dependency")
    deps.add_column("state")
    for name, state in answer.get("dependencies", {}).items():
        deps.add_row(name, ui.styled("ok", "green") if state == "ok" else ui.styled(str(state), "red"))
    ui.show_table(deps, opts.wide, console)
    problems = answer.get("recentProblems", [])
    if not problems:
        ui.say(console, "no warnings or errors lately")
        return
    recent = Table(title="last warnings and errors")
    for column in ("time", "level", "message"):
        recent.add_column(column)
    for p in problems[-10:]:
        repeated = int(p.get("repeated") or 1)
        recent.add_row(p["ts"], p["level"], p["msg"] + (f" (and {repeated - 1} more like it)" if repeated > 1 else ""))
    ui.show_table(recent, opts.wide, console)


def undelivered_line(state: dict[str, Any]) -> str | Text:
    """Requests the broker handed to a consumer that does not process them, in words, with what to do."""
    if not state.get("known"):
        return f"undelivered requests: unknown ({state.get('why', 'not reported')})"
    count = state.get("count", 0)
    if not count:
        return "undelivered requests: none (every request handed to a consumer is being processed)"
    quiet = max((state.get("quietSeconds") or {}).values(), default=0)
    topics = ", ".join(sorted(state.get("byTopic") or {}))
    return Text.assemble((f"STRANDED: {count} request(s) handed to a consumer that has neither acknowledged them "
                          f"nor been delivered anything for {quiet} s", "red"), f" ({topics}): {state.get('remedy')}")


def _watcher_line(watcher: dict[str, Any]) -> str:
    """Who watches for leaks and how far behind, in one line."""
    if not watcher.get("enabled"):
        return "leak watcher: off on this daemon"
    who = "this daemon" if watcher.get("watching") else (watcher.get("watcher") or "nobody yet")
    if watcher.get("watching") and watcher.get("lastPass") is None:
        return f"leak watcher: {who} watches; its first pass is under way"
    if not watcher.get("watching"):
        return f"leak watcher: {who} watches (this daemon waits to take over)"
    return (f"leak watcher: {who} watches; last pass began {_local(watcher.get('lastPass'))}, "
            f"{watcher.get('lagSeconds')} s behind; {watcher.get('waitingToSettle')} departed ledgers wait out "
            f"the {watcher.get('settleSeconds'):g} s settle delay")


def _held_table(groups: list[dict[str, Any]]) -> Table:
    """Why held requests wait and when each group falls due: held is waiting, not stuck."""
    table = Table(title="held: waiting, not stuck (each group is retried when due)")
    for column in ("count", "why they wait", "first due", "last due", "e.g."):
        table.add_column(column, justify="right" if column == "count" else "left")
    for g in groups:
        table.add_row(str(g.get("count")), str(g.get("why")), _local(g.get("firstDue")), _local(g.get("lastDue")),
                      str(g.get("example") or ""))
    return table


def _local(iso: Any) -> str:
    """The admin API's ISO UTC time as local time, with its date when not today."""
    if not isinstance(iso, str):
        return "—"
    try:
        return local_moment(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return iso
