"""``audit [--ledger N] [--topic T] [--since WHEN]`` and ``audit verify``: read the audit trail.

Reads ``<data-dir>/audit/`` only: no store, nothing started, so an auditor can run
it on a copy of the trail, months later, on another machine.  The one exception:
``audit verify`` with the topic copy enabled (``ledgerDeletionAuditTopicEnabled``, or
``--against-topic``) also reads ``<deletion topic>-AUDIT`` from the broker (the embedded
one is started for it if none runs); ``--files-only`` checks the files alone.  It
always says which it checked.
"""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from deletion_service.audit import reader, trail
from deletion_service.audit.operator_actions import OUTCOMES as OPERATOR_OUTCOMES
from deletion_service.audit.publish import audit_topic
from deletion_service.audit.topic_check import TopicComparison, compare
from deletion_service.audit.verify import verify as verify_trail
from deletion_service.broker.interface import BrokerError
from deletion_service.cli import options, settings, ui
from deletion_service.cli.connections import connect_broker
from deletion_service.config import DeletionConfig
from deletion_service.errors import UsageError, UserError
from deletion_service.orphans.scan_options import parse_duration
from deletion_service.protocol.fate import Outcome
from deletion_service.protocol.topics import DeletionTopics

#: What a record may say it ended as: a request's fate, or what an operator did with a parked one.
_KNOWN = (*(o.value for o in Outcome), *OPERATOR_OUTCOMES)

HELP = """The audit trail: one record per settled deletion request (what, outcome, why, the evidence
verified), hash-chained. Without a subcommand: print the records that match (oldest first; --newest-first,
--limit N for the newest N; --from-topic for every replica's records, from the topic copy).
`audit verify` checks the chain."""


def register(app: typer.Typer) -> None:
    audit_app = typer.Typer(help=HELP)
    audit_app.callback(invoke_without_command=True)(show)
    audit_app.command("verify", help="Check the chain: exit 0 when it is whole, 1 naming the first record that "
                                     "breaks it (edited, removed, reordered, truncated). With the topic copy "
                                     "enabled, also compare the files with <topic>-AUDIT.")(verify)
    app.add_typer(audit_app, name="audit")


def show(
    ctx: typer.Context,
    ledger: Annotated[int | None, typer.Option("--ledger", "-l", metavar="N", help="only this ledger id")] = None,
    topic: Annotated[str | None, typer.Option("--topic", "-t", help="only requests for this topic")] = None,
    since: Annotated[str | None, typer.Option(
        metavar="WHEN", help="only records from then on: an ISO date or time (2026-11-01, 2026-11-01T12:00Z, "
                             "local time without a zone) or a duration back from now (90m, 6h, 1d, 2w)")] = None,
    outcome: Annotated[list[str] | None, typer.Option(
        "--outcome", "-o", metavar="OUTCOME",
        help="only records that ended so (repeatable): " + ", ".join(_KNOWN))] = None,
    limit: Annotated[int | None, typer.Option("--limit", "-n", min=0, metavar="N",
                                              help="only the newest N records that match")] = None,
    newest_first: Annotated[bool, typer.Option("--newest-first", help="print the newest record first")] = False,
    from_topic: Annotated[bool, typer.Option(
        "--from-topic", help="read the <ledgerDeletionTopic>-AUDIT topic copy instead of this data dir's files: "
                             "every replica's records in one place (needs ledgerDeletionAuditTopicEnabled on the "
                             "daemons)")] = False,
) -> None:
    if ctx.invoked_subcommand is not None:
        return
    opts = options.get(ctx)
    query = reader.Query(ledger, options.topic(topic) if topic is not None else None,
                         since_ms(since) if since is not None else None, _outcomes(outcome))
    found = reader.select_from(_from_topic(opts) if from_topic else reader.records(_existing(opts.data_dir)),
                               query, newest_first, limit)
    if opts.json:
        typer.echo(json.dumps(found.records, indent=2, ensure_ascii=False))
        return
    ui.show_table(_table(found), opts.wide)


def _outcomes(given: list[str] | None) -> frozenset[str] | None:
    """``--outcome``: Outcome values (``still-in-use`` spelled either way); an unknown one is refused,
    naming the known ones (a typo must not answer "0 records")."""
    if not given:
        return None
    wanted = {g.strip().lower().replace("-", "_") for g in given}
    unknown = sorted(wanted - set(_KNOWN))
    if unknown:
        raise UsageError(f"unknown --outcome {', '.join(unknown)}; known: {', '.join(_KNOWN)}")
    return frozenset(wanted)


def _from_topic(opts: options.CommonOptions) -> list[dict[str, Any] | None]:
    """Every record of the ``-AUDIT`` topic copy (a Reader: nothing acked), whichever replica wrote it."""
    config = settings.load(opts).config
    topic = audit_topic(config.ledger_deletion_topic)
    with ExitStack() as stack:
        try:
            broker, _ = connect_broker(opts, config, DeletionTopics.from_config(config), own_broker=False,
                                       stack=stack, request_topics=False)
            messages = broker.read_all(topic)
        except BrokerError as e:
            raise UserError(f"cannot read the audit topic copy {topic}: {e}") from e
    if not messages and not config.ledger_deletion_audit_topic_enabled:
        raise UserError(f"the audit topic copy {topic} is empty, and ledgerDeletionAuditTopicEnabled is false here: "
                        "turn it on for the daemons to have their records copied there, or read a data dir's files "
                        "(without --from-topic)")
    return list(reader.parsed(m.data for m in messages))


def verify(
    ctx: typer.Context,
    against_topic: Annotated[bool | None, typer.Option(
        "--against-topic/--files-only",
        help="also compare the files with the <ledgerDeletionTopic>-AUDIT copy (default: when "
             "ledgerDeletionAuditTopicEnabled), or check the files alone")] = None,
) -> None:
    opts = options.get(ctx)
    directory = _existing(opts.data_dir)
    verdict = verify_trail(directory)
    config = settings.load(opts).config
    use_topic = config.ledger_deletion_audit_topic_enabled if against_topic is None else against_topic
    copy = _compare_with_topic(opts, config, directory) if use_topic else None
    whole = verdict.whole and (copy is None or copy.whole)
    checked = "files only" if copy is None else f"files + topic {copy.topic}"
    topic_broken = copy is not None and not copy.whole
    if opts.json:
        broken = verdict.broken
        first_bad = broken.seq if broken else (copy.first_bad_seq if copy is not None else None)
        problem = broken.describe() if broken else (copy.describe() if topic_broken and copy is not None else None)
        typer.echo(json.dumps({"whole": whole, "checked": "files" if copy is None else "files+topic",
                               "records": verdict.records, "wholeBeforeBreak": verdict.whole_before_break,
                               "files": verdict.files,
                               "lastSeq": verdict.last_seq, "firstBadSeq": first_bad, "problem": problem,
                               "topicCopy": copy.as_json() if copy is not None else None}))
        raise typer.Exit(0 if whole else 1)
    if verdict.broken is not None:
        raise UserError(f"audit trail broken at {verdict.broken.describe()}; "
                        f"{verdict.whole_before_break} record(s) before it are whole (checked: {checked}"
                        + (f"; {copy.describe()}" if topic_broken and copy is not None else "") + ")")
    if topic_broken and copy is not None:
        raise UserError(f"audit trail broken at record seq {copy.first_bad_seq}: {copy.describe()}; the files' "
                        f"chain alone is whole ({verdict.records} record(s); checked: {checked})")
    typer.echo(f"audit trail whole: {verdict.records} record(s) in {verdict.files} file(s)"
               + (f", seq 1–{verdict.last_seq}" if verdict.last_seq else "") + f"; checked: {checked}"
               + (f" ({copy.summary()})" if copy is not None else ""))


def _compare_with_topic(opts: options.CommonOptions, config: DeletionConfig, directory: Path) -> TopicComparison:
    """Read the whole ``-AUDIT`` topic (a Reader: nothing acked) and compare it with the files."""
    topics = DeletionTopics.from_config(config)
    topic = audit_topic(config.ledger_deletion_topic)
    with ExitStack() as stack:
        try:
            broker, _ = connect_broker(opts, config, topics, own_broker=False, stack=stack, request_topics=False)
            messages = broker.read_all(topic)
        except BrokerError as e:
            raise UserError(f"cannot read the audit topic copy {topic}: {e} (--files-only checks the files "
                            "alone)") from e
    file_lines = [raw for _, path in trail.files(directory) for _, raw, complete in trail.lines(path) if complete]
    return compare(topic, file_lines, (m.data for m in messages))


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
        table.add_row(str(rec["seq"]), at, str(rec["outcome"]), _request(rec["request"]), str(rec["reason"]),
                      _evidence(rec["evidence"]))
    return table


def _request(request: dict[str, Any] | None) -> str:
    if not request:
        return "(undecodable message)"
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
