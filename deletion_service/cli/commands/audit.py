"""``audit [--ledger N] [--topic T] [--since WHEN]`` and ``audit verify``: read the audit trail.

Reads ``<data-dir>/audit/`` only: no store, no broker, nothing started, so an
auditor can run it on a copy of the trail, months later, on another machine.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from deletion_service.audit import reader, trail
from deletion_service.audit.verify import verify as verify_trail
from deletion_service.cli import options
from deletion_service.errors import UsageError, UserError
from deletion_service.orphans.scan_options import parse_duration

HELP = """The audit trail: one record per settled deletion request (what, outcome, why, the evidence
verified), hash-chained. Without a subcommand: print the records that match (oldest first).
`audit verify` checks the chain."""


def register(app: typer.Typer) -> None:
    audit_app = typer.Typer(help=HELP)
    audit_app.callback(invoke_without_command=True)(show)
    audit_app.command("verify", help="Check the chain: exit 0 when it is whole, 1 naming the first record that "
                                     "breaks it (edited, removed, reordered, truncated).")(verify)
    app.add_typer(audit_app, name="audit")


def show(
    ctx: typer.Context,
    ledger: Annotated[int | None, typer.Option("--ledger", "-l", metavar="N", help="only this ledger id")] = None,
    topic: Annotated[str | None, typer.Option("--topic", "-t", help="only requests for this topic")] = None,
    since: Annotated[str | None, typer.Option(
        metavar="WHEN", help="only records from then on: an ISO date or time (2026-11-01, 2026-11-01T12:00Z, "
                             "local time without a zone) or a duration back from now (90m, 6h, 1d, 2w)")] = None,
) -> None:
    if ctx.invoked_subcommand is not None:
        return
    opts = options.get(ctx)
    query = reader.Query(ledger, options.topic(topic) if topic is not None else None,
                         since_ms(since) if since is not None else None)
    found = reader.select(_existing(opts.data_dir), query)
    if opts.json:
        typer.echo(json.dumps(found.records, indent=2, ensure_ascii=False))
        return
    Console().print(_table(found))


def verify(ctx: typer.Context) -> None:
    opts = options.get(ctx)
    directory = _existing(opts.data_dir)
    verdict = verify_trail(directory)
    if opts.json:
        broken = verdict.broken
        typer.echo(json.dumps({"whole": verdict.whole, "records": verdict.records, "files": verdict.files,
                               "lastSeq": verdict.last_seq, "firstBadSeq": broken.seq if broken else None,
                               "problem": broken.describe() if broken else None}))
        raise typer.Exit(0 if verdict.whole else 1)
    if verdict.broken is not None:
        raise UserError(f"audit trail broken at {verdict.broken.describe()}; "
                        f"{verdict.records} record(s) before it are whole")
    typer.echo(f"audit trail whole: {verdict.records} record(s) in {verdict.files} file(s)"
               + (f", seq 1–{verdict.last_seq}" if verdict.last_seq else ""))


def since_ms(text: str, now: float | None = None) -> int:
    """``--since``: an ISO date/time (no zone: local time, as an operator types it) or a duration ago."""
    try:
        return int(((time.time() if now is None else now) - parse_duration(text)) * 1000)
    except UsageError:
        pass
    try:
        return int(datetime.fromisoformat(text.strip()).timestamp() * 1000)
    except ValueError:
        raise UsageError(f"--since expects an ISO date or time (2026-11-01, 2026-11-01T12:00Z) or a duration "
                         f"back from now (90m, 6h, 1d, 2w), got {text!r}") from None


def _existing(data_dir: Path) -> Path:
    directory = trail.audit_dir(data_dir)
    if not directory.is_dir():
        raise UserError(f"no audit trail under {directory.resolve()} (is --data-dir the daemon's?)")
    return directory


def _table(found: reader.Selection) -> Table:
    skipped = f"; {found.skipped} unreadable line(s) skipped (run 'audit verify')" if found.skipped else ""
    table = Table(title=f"{len(found.records)} audit record(s){skipped}")
    for col in ("seq", "at (UTC)", "outcome", "request", "reason", "evidence"):
        table.add_column(col, no_wrap=col in ("seq", "at (UTC)", "outcome"))
    for rec in found.records:
        at = datetime.fromtimestamp(rec["at"] / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S") \
            if isinstance(rec["at"], int) else "?"
        table.add_row(str(rec["seq"]), at, str(rec["outcome"]), _request(rec["request"]), str(rec["reason"])[:120],
                      _evidence(rec["evidence"]))
    return table


def _request(request: dict[str, Any] | None) -> str:
    if not request:
        return "[red]undecodable message"
    return f"{request.get('ledgerType')} {request.get('ledgerId')} of {request.get('topicName')} " \
           f"({request.get('reason')})"


def _evidence(evidence: Any) -> str:
    if not isinstance(evidence, dict):
        return "?"
    parts = []
    if evidence.get("bkVersion") is not None:
        parts.append(f"znode v{evidence['bkVersion']}")
    if evidence.get("references"):
        parts.append("referenced: " + "; ".join(map(str, evidence["references"])))
    objects = evidence.get("offloadObjects") or []
    if objects:
        parts.append(f"{len(objects)} object(s), {sum(o.get('size', 0) for o in objects)} bytes deleted")
    return ", ".join(parts)
