"""Which ledgers a topic's metadata still references — pure functions over decoded nodes.

"Still in use" must count every way Pulsar can reach a ledger, or phase two
would delete live data: the managed ledger's list (including offloaded
ledgers), cursor ledgers of cursors whose state lives in BookKeeper, the
schema locator's entries, and the compacted-topic ledger (a property of the
``__compaction`` cursor).  Upstream's PR skipped cursor and schema ledgers; we
do not.
"""

from __future__ import annotations

from collections.abc import Mapping

from metastore.formats import ManagedCursorInfo, ManagedLedgerInfo, SchemaLocator

COMPACTION_CURSOR = "__compaction"
COMPACTED_LEDGER_PROPERTY = "CompactedTopicLedger"


def topic_references(
    managed_ledger: ManagedLedgerInfo | None,
    cursors: Mapping[str, ManagedCursorInfo],
    schema: SchemaLocator | None,
    schema_id: str | None = None,
) -> dict[int, list[str]]:
    """ledger id → every reason it is referenced (an empty map for a topic that no longer exists)."""
    refs: dict[int, list[str]] = {}

    def add(ledger_id: int, why: str) -> None:
        refs.setdefault(ledger_id, []).append(why)

    if managed_ledger is not None:
        for ledger in managed_ledger.ledgers:
            offloaded = ledger.offload_context is not None and bool(ledger.offload_context.complete)
            add(ledger.ledger_id, "listed in the managed ledger" + (" (offloaded)" if offloaded else ""))
    for name, cursor in cursors.items():
        if not cursor.state_in_metadata_store and cursor.cursors_ledger_id >= 0:
            add(cursor.cursors_ledger_id, f"cursor ledger of subscription {name!r}")
        if name == COMPACTION_CURSOR and COMPACTED_LEDGER_PROPERTY in cursor.properties:
            add(cursor.properties[COMPACTED_LEDGER_PROPERTY], "compacted-topic ledger")
    if schema is not None:
        for ledger_id in schema.ledger_ids():
            add(ledger_id, f"schema ledger of {schema_id or 'the topic'}")
    return refs
