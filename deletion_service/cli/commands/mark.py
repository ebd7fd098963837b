"""``trim`` and ``enqueue``: phase one from the command line."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from deletion_service.broker.interface import display_message_id
from deletion_service.broker.publisher import route
from deletion_service.cli import connections, known_names, options, settings, ui
from deletion_service.cli.commands import enqueue_checks
from deletion_service.config import DeletionConfig
from deletion_service.errors import UsageError, UserError
from deletion_service.mark_phase import enqueue as enqueue_mod
from deletion_service.mark_phase.pick import OffloadLocation
from deletion_service.mark_phase.trim import trim as run_trim
from deletion_service.protocol.request import PendingDeleteLedgerInfo, encode
from deletion_service.protocol.topics import DeletionTopics
from metastore.formats import pulsar_cursor_name


class Component(StrEnum):
    MANAGED_LEDGER = "MANAGED_LEDGER"
    MANAGED_CURSOR = "MANAGED_CURSOR"
    SCHEMA_STORAGE = "SCHEMA_STORAGE"
    COMPACTED_LEDGER = "COMPACTED_LEDGER"
    DELAYED_INDEX_BUCKET = "DELAYED_INDEX_BUCKET"


def _single_request(topic: str | None, ledger_id: int | None, component: Component, cursor: str | None,
                    schema_id: str | None) -> PendingDeleteLedgerInfo:
    """The one request ``--topic``/``--ledger-id`` describe, every mistake a usage error in our words
    (checked here so pydantic's phrasing never reaches the operator)."""
    if topic is None or ledger_id is None:
        raise UsageError("give --topic and --ledger-id (or --from-file)")
    topic = options.topic(topic)
    if component in (Component.MANAGED_CURSOR, Component.DELAYED_INDEX_BUCKET) and not cursor:
        raise UsageError(f"--component {component.value} needs --cursor (the cursor the ledger belongs to)")
    if component is Component.SCHEMA_STORAGE and not schema_id:
        raise UsageError("--component SCHEMA_STORAGE needs --schema-id (tenant/ns/topic)")
    if component is Component.MANAGED_CURSOR and cursor:
        cursor = pulsar_cursor_name(cursor)  # the name Pulsar gives the subscription's cursor and its ledgers
    try:
        return enqueue_mod.single_request(topic, ledger_id, component.value, cursor, schema_id)
    except UserError as e:  # a disagreement between the fields, e.g. a schema id of another topic
        raise UsageError(str(e).replace("payload: Value error, ", "").replace("Value error, ", "")) from e


def _doubts(opts: options.CommonOptions, cfg: DeletionConfig, request: PendingDeleteLedgerInfo, typed: str | None,
            dry_run: bool, allow_missing_topic: bool) -> list[str]:
    """What is doubtful about the one request (:mod:`.enqueue_checks`); a topic the store does not have is
    refused, and a short name is said as Pulsar resolves it (``bad`` is ``persistent://public/default/bad``)."""
    try:
        return enqueue_checks.warnings(opts, cfg, request, dry_run, allow_missing_topic)
    except UserError as e:
        if typed is not None and typed != request.topic_name:
            raise UserError(f"{e} (--topic {typed} means {request.topic_name}, as in Pulsar)") from e
        raise


def _report_sent(as_json: bool, ids: list[str], destinations: list[str], doubts: list[str]) -> None:
    """What was sent; a doubt about it (a ledger that exists nowhere) in the JSON, or as warnings on stderr."""
    if as_json:
        typer.echo(json.dumps({"sent": len(ids), "messageIds": ids, "warnings": doubts}))
        return
    typer.echo(f"sent {len(ids)} deletion request(s) to {', '.join(destinations)}"
               + (f": {ui.ids(ids)}" if ids else ""))
    for doubt in doubts:
        ui.warn(doubt)


def _report_dry_run(as_json: bool, cfg: DeletionConfig, requests: list[PendingDeleteLedgerInfo],
                    doubts: list[str]) -> None:
    """Each request as it would be sent, and the partition it would go to; nothing is connected to."""
    topics = DeletionTopics.from_config(cfg)
    scope = cfg.ledger_deletion_topic_scope == "namespace"
    planned = [(route(r, topics, scope).partition_for(r.ledger_id), r) for r in requests]
    if as_json:
        typer.echo(json.dumps({"dryRun": True, "wouldSend": len(planned), "warnings": doubts, "requests": [
            {"topic": topic, "payload": json.loads(encode(r))} for topic, r in planned]}))
        return
    typer.echo(f"dry run: would send {len(planned)} deletion request(s); nothing was sent")
    for topic, r in planned:
        typer.echo(f"{topic}  {encode(r).decode()}")
    for doubt in doubts:
        ui.warn(doubt)


def _send(opts: options.CommonOptions, cfg: DeletionConfig,
          requests: list[PendingDeleteLedgerInfo]) -> tuple[list[str], list[str]]:
    """Send every request (receipted), with a progress bar for many; the receipts and where they went."""
    with connections.publisher(opts, cfg) as publisher, ui.progress(len(requests) > 1 and not opts.json) as bar:
        task = bar.add_task("sending", total=len(requests))
        try:
            sent = enqueue_mod.send_all(requests, publisher.send_requests, lambda n: bar.update(task, completed=n))
        except enqueue_mod.NotAllSent as e:
            unsent = ui.ids([requests[i].ledger_id for i in e.unsent()])
            raise UserError(f"{e.first}; sent {e.sent} of {len(requests)}; not sent: ledger(s) {unsent} "
                            "(sending a request again is harmless)") from e
        # where they went: the cluster's topic, or (namespace scope) each request's namespace's
        destinations = sorted({publisher.topics_for(r).base for r in requests}) or [cfg.ledger_deletion_topic]
    return sent, destinations


def register(app: typer.Typer) -> None:
    @app.command(help="Send deletion requests (never edits metadata). Offloaded copies: use --from-file.")
    def enqueue(
        ctx: typer.Context,
        topic: Annotated[str | None, typer.Option("--topic", "-t", help="persistent://tenant/ns/topic")] = None,
        ledger_id: Annotated[int | None, typer.Option(
            min=0, metavar="N", help="the BookKeeper ledger to delete")] = None,
        component: Annotated[Component, typer.Option(
            case_sensitive=False, metavar="KIND", show_choices=False, show_default=False,
            help="MANAGED_LEDGER (default), MANAGED_CURSOR, SCHEMA_STORAGE, COMPACTED_LEDGER (the topic is the "
                 "compacted topic) or DELAYED_INDEX_BUCKET")] = Component.MANAGED_LEDGER,
        cursor: Annotated[str | None, typer.Option(
            help="the subscription the ledger belongs to, for MANAGED_CURSOR and DELAYED_INDEX_BUCKET, named "
                 "as pulsar-admin names it (a MANAGED_CURSOR request carries it URL-encoded, as Pulsar names "
                 "the cursor: 'a b' -> 'a+b')")] = None,
        schema_id: Annotated[str | None, typer.Option(help="schema id, for SCHEMA_STORAGE")] = None,
        from_file: Annotated[Path | None, typer.Option(help="JSON Lines of PendingDeleteLedgerInfo")] = None,
        dry_run: Annotated[bool, typer.Option("--dry-run", help="show what would be sent; send nothing")] = False,
        allow_missing_topic: Annotated[bool, typer.Option(
            "--allow-missing-topic",
            help="send even though the metadata store has no such topic (a deleted topic's leftover ledger); "
                 "without it such a topic is refused, naming the closest one")] = False,
    ) -> None:
        opts = options.get(ctx)
        if from_file is not None:
            if topic is not None or ledger_id is not None:
                raise UsageError("give either --from-file or --topic/--ledger-id, not both")
            requests = enqueue_mod.read_requests(from_file)
        else:
            requests = [_single_request(topic, ledger_id, component, cursor, schema_id)]
        cfg = settings.load(opts).config
        doubts = _doubts(opts, cfg, requests[0], topic, dry_run, allow_missing_topic) if from_file is None else []
        if dry_run:
            _report_dry_run(opts.json, cfg, requests, doubts)
            return
        sent, destinations = _send(opts, cfg, requests)
        _report_sent(opts.json, [display_message_id(i) for i in sent], destinations, doubts)

    app.command(help="The mark phase for one managed ledger (for topics no broker owns).")(trim)


def trim(
    ctx: typer.Context,
    topic: Annotated[str, typer.Option("--topic", "-t", help="persistent://tenant/ns/topic")],
    dry_run: Annotated[bool, typer.Option(help="show what would be picked; send and write nothing")] = False,
    offline: Annotated[bool, typer.Option(help="you assert no broker serves this topic")] = False,
) -> None:
    opts = options.get(ctx)
    topic = options.topic(topic)
    cfg = settings.load(opts).config
    if not cfg.topic_two_phase_deletion_enabled:
        raise UserError("topicTwoPhaseDeletionEnabled is false: trim would not announce its deletions")
    fallback = OffloadLocation.from_settings(
        cfg.managed_ledger_offload_driver, cfg.managed_ledger_offload_bucket, cfg.managed_ledger_offload_region,
        cfg.managed_ledger_offload_service_endpoint)
    with connections.open_metadata_store(opts, cfg, must_exist=True) as store:
        missing = known_names.missing_topic(store, topic)  # the closest name, as enqueue gives it
        if missing is not None:
            raise UserError(f"{missing}: nothing to trim")
        if dry_run:
            result = run_trim(store, topic, lambda rs: [""] * len(rs), offline=offline, dry_run=True,
                              offload_fallback=fallback)
        else:
            with connections.publisher(opts, cfg) as publisher, ui.progress(not opts.json) as bar:
                task = bar.add_task("sending requests", total=None)
                result = run_trim(store, topic, publisher.send_requests, offline=offline, offload_fallback=fallback,
                                  write_within_s=cfg.two_phase_deletion_in_use_grace_seconds,
                                  progress=lambda n, total: bar.update(task, completed=n, total=total))
    if opts.json:
        typer.echo(json.dumps({**result.to_json(), "dryRun": dry_run}))
        return
    table = Table(title=f"trim {result.topic}" + (" (dry run)" if dry_run else ""), show_header=False)
    table.add_row("picked", ui.ids(result.picked) or "none")
    if not dry_run:
        table.add_row("removed from the ledger list", ui.ids(result.removed) or "none")
        table.add_row("metadata writes", str(result.metadata_writes))
    if result.not_sent:
        table.add_row("not sent (kept)", ui.ids(result.not_sent))
    for kept in result.kept:
        table.add_row(ui.styled(f"kept {kept.ledger_id}", "yellow"), kept.why)
    if result.note:
        table.add_row("note", result.note)
    if result.aborted:
        table.add_row(ui.styled("aborted", "red"), result.aborted)
    ui.show_table(table, opts.wide)
