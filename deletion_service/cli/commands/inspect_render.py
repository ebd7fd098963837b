"""Decoded metadata as the CLI contract's JSON, and as tables for people.

Pure functions over the format dataclasses: the shapes here are the contract
(``inspect … --json``) that operators' scripts parse, so they are built
explicitly field by field rather than dumped from the dataclasses.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from deletion_service.cli import ui
from deletion_service.cursor.health import state_size
from metastore.formats import LedgerMetadata, ManagedCursorInfo, ManagedLedgerInfo, Position

#: Acked ranges a table shows before summarising the rest (a slow consumer's cursor holds millions).
SHOWN_RANGES = 10


def _pos(p: Position | None) -> dict[str, int] | None:
    return None if p is None else {"ledgerId": p.ledger_id, "entryId": p.entry_id}


def managed_ledger_json(info: ManagedLedgerInfo) -> dict[str, Any]:
    ledgers = []
    for ledger in info.ledgers:
        ctx = ledger.offload_context
        ledgers.append({
            "ledgerId": ledger.ledger_id,
            "entries": ledger.entries,
            "size": ledger.size,
            "timestamp": ledger.timestamp,
            "offloadContext": None if ctx is None else {
                "uidMsb": ctx.uid_msb,
                "uidLsb": ctx.uid_lsb,
                "complete": ctx.complete,
                "bookkeeperDeleted": ctx.bookkeeper_deleted,
                "driverName": ctx.driver_name,
                "driverMetadata": dict(ctx.driver_metadata),
            },
        })
    return {
        "ledgers": ledgers,
        "properties": dict(info.properties),
        "terminatedPosition": _pos(info.terminated_position),
    }


def ack_state_json(info: ManagedCursorInfo, budget: int) -> dict[str, Any]:
    size = state_size(info)
    return {"stateBytes": size, "budgetBytes": budget, "ranges": len(info.individual_deleted_messages),
            "batchEntries": len(info.batched_entry_deletion_index_info), "overBudget": size > budget}


def cursor_json(info: ManagedCursorInfo, budget: int) -> dict[str, Any]:
    return {
        "ackState": ack_state_json(info, budget),
        "cursorsLedgerId": info.cursors_ledger_id,
        "markDeletePosition": _pos(info.mark_delete),
        "individualDeletedMessages": [
            {"lower": _pos(r.lower), "upper": _pos(r.upper)} for r in info.individual_deleted_messages
        ],
        "batchedEntryDeletionIndexInfo": [
            {"position": _pos(b.position), "unackedIndexes": list(b.unacked)}
            for b in info.batched_entry_deletion_index_info
        ],
        "properties": dict(info.properties),
        "cursorProperties": dict(info.cursor_properties),
        "lastActive": info.last_active,
    }


def bk_ledger_json(meta: LedgerMetadata, znode_ctime_ms: int | None = None) -> dict[str, Any]:
    """``ctime`` falls back to the znode's creation time when the ledger records none."""
    ctime = meta.ctime if meta.ctime is not None else znode_ctime_ms
    return {
        "formatVersion": meta.format_version,
        "state": meta.state,
        "length": meta.length,
        "lastEntryId": meta.last_entry_id,
        "ensembleSize": meta.ensemble_size,
        "writeQuorumSize": meta.quorum_size,
        "ackQuorumSize": meta.ack_quorum_size,
        "ctime": ctime,
        "customMetadata": {k: v.decode("utf-8", errors="replace") for k, v in meta.custom_metadata.items()},
    }


def _dash(v: object) -> str:
    return "—" if v is None else str(v)


def _when(ms: int | None) -> str:
    """Epoch milliseconds for people: an ISO time in UTC (``--json`` keeps the raw number).
    0 is what Pulsar writes for "never" (a cursor not active since the field existed)."""
    if ms is None:
        return "—"
    if ms <= 0:
        return f"never ({ms})"
    return ui.utc(ms, millis=True)


def managed_ledger_table(info: ManagedLedgerInfo, title: str) -> list[Table]:
    ledgers = Table(title=title)
    for col in ("ledger", "entries", "size", "timestamp (UTC)", "offloaded"):
        ledgers.add_column(col, justify="right" if col != "offloaded" else "left")
    for ledger in info.ledgers:
        ctx = ledger.offload_context
        offload = "—"
        if ctx is not None:
            bucket = ctx.driver_metadata.get("bucket", "")
            state = "complete" if ctx.complete else "incomplete"
            bk = ", BookKeeper copy deleted" if ctx.bookkeeper_deleted else ""
            offload = f"{ctx.driver_name or '?'} {bucket} ({state}{bk})".strip()
        ledgers.add_row(str(ledger.ledger_id), _dash(ledger.entries), _dash(ledger.size),
                        _when(ledger.timestamp), offload)
    tables = [ledgers]
    extra = _kv_table("properties", info.properties)
    if info.terminated_position is not None:
        extra.add_row("terminated at", f"{info.terminated_position.ledger_id}:{info.terminated_position.entry_id}")
    extra.add_row("compression", info.compression.name)
    tables.append(extra)
    return tables


def cursor_table(info: ManagedCursorInfo, title: str, budget: int) -> list[Table]:
    main = Table(title=title, show_header=False)
    main.add_row("state lives in", "metadata store" if info.state_in_metadata_store
                 else f"cursor ledger {info.cursors_ledger_id}")
    md = info.mark_delete
    main.add_row("mark-delete position", "—" if md is None else f"{md.ledger_id}:{md.entry_id}")
    main.add_row("last active (UTC)", _when(info.last_active))
    main.add_row("compression", info.compression.name)
    state = ack_state_json(info, budget)
    main.add_row("ack state", Text.assemble(f"{state['stateBytes']:,} B of {budget:,} B persist budget "
                                            f"({state['stateBytes'] / budget:.0%}), ",
                                            ("over budget", "bold red") if state["overBudget"] else "within budget"))
    ranges = info.individual_deleted_messages
    for r in ranges[:SHOWN_RANGES]:
        main.add_row("acked range", f"({r.lower.ledger_id}:{r.lower.entry_id}, {r.upper.ledger_id}:{r.upper.entry_id}]")
    if len(ranges) > SHOWN_RANGES:
        main.add_row("", f"… {len(ranges) - SHOWN_RANGES:,} more acked ranges (--json lists all)")
    for b in info.batched_entry_deletion_index_info:
        main.add_row(f"batch {b.position.ledger_id}:{b.position.entry_id}",
                     f"{len(b.unacked)} unacked: {_compact(b.unacked)}")
    tables = [main]
    if info.properties or info.cursor_properties:
        tables.append(_kv_table("properties", {**info.properties, **info.cursor_properties}))
    return tables


def bk_ledger_table(meta: LedgerMetadata, title: str, znode_ctime_ms: int | None = None) -> list[Table]:
    data = bk_ledger_json(meta, znode_ctime_ms)
    main = Table(title=title, show_header=False)
    for key in ("formatVersion", "state", "length", "lastEntryId", "ensembleSize", "writeQuorumSize",
                "ackQuorumSize"):
        main.add_row(key, _dash(data[key]))
    main.add_row("ctime (UTC)", _when(data["ctime"]))
    for seg in meta.segments:
        main.add_row(f"ensemble from entry {seg.first_entry_id}", ", ".join(seg.ensemble))
    return [main, _kv_table("custom metadata", data["customMetadata"])]


def _kv_table(title: str, values: dict[str, Any]) -> Table:
    table = Table(title=title, show_header=False)
    for k, v in sorted(values.items()):
        table.add_row(k, str(v))
    return table


def _compact(indexes: list[int]) -> str:
    """``0-1, 3-62, 64``: runs instead of sixty numbers."""
    runs: list[str] = []
    start = prev = None
    for i in indexes:
        if prev is not None and i == prev + 1:
            prev = i
            continue
        if start is not None:
            runs.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = i
    if start is not None:
        runs.append(str(start) if start == prev else f"{start}-{prev}")
    return ", ".join(runs)
