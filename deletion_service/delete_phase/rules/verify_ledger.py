"""Does BookKeeper's own metadata say this ledger is what the request claims? Pure.

Anyone who can publish to the system topic can forge a request, so a ledger
is deleted only when the custom metadata Pulsar wrote at creation names the
same topic, component, cursor or schema as the request (a compacted ledger: the
compacted topic; a delayed-delivery bucket: its managed ledger and cursor).  A mismatch is never
deleted and never retried: retrying cannot make it match.
"""

from __future__ import annotations

from deletion_service.protocol.request import CURSOR_COMPONENTS, DeleteLedgerPayload, LedgerComponent
from metastore.formats import LedgerMetadata, managed_ledger_name, schema_id
from metastore.formats.custom_metadata import (
    APPLICATION_KEY,
    APPLICATION_PULSAR,
    COMPACTED_TOPIC_KEY,
    COMPONENT_COMPACTED_LEDGER,
    COMPONENT_DELAYED_INDEX_BUCKET,
    COMPONENT_KEY,
    COMPONENT_MANAGED_LEDGER,
    COMPONENT_SCHEMA,
    CURSOR_KEY,
    MANAGED_LEDGER_KEY,
    SCHEMA_ID_KEY,
)


def mismatch(request: DeleteLedgerPayload, metadata: LedgerMetadata) -> str | None:
    """``None`` when the metadata matches the request, else what differs (for logs and metrics)."""
    meta = metadata.custom_texts
    if meta.get(APPLICATION_KEY) != APPLICATION_PULSAR:
        return f"not a Pulsar ledger (application={meta.get(APPLICATION_KEY)!r})"
    component = meta.get(COMPONENT_KEY)
    if request.ledger_component == LedgerComponent.SCHEMA_STORAGE:
        if component != COMPONENT_SCHEMA:
            return f"request says schema ledger, BookKeeper says component={component!r}"
        # Both the request's schemaId and its topic's must be the one BookKeeper names.
        for claimed in {request.schema_id, schema_id(request.topic_name)}:
            if meta.get(SCHEMA_ID_KEY) != claimed:
                return f"schema id differs: request {claimed!r}, BookKeeper {meta.get(SCHEMA_ID_KEY)!r}"
        return None
    if request.ledger_component == LedgerComponent.COMPACTED_LEDGER:
        if component != COMPONENT_COMPACTED_LEDGER:
            return f"request says compacted ledger, BookKeeper says component={component!r}"
        if meta.get(COMPACTED_TOPIC_KEY) != request.topic_name:
            return (f"compacted topic differs: request {request.topic_name!r}, "
                    f"BookKeeper {meta.get(COMPACTED_TOPIC_KEY)!r}")
        return None
    wanted = (COMPONENT_DELAYED_INDEX_BUCKET if request.ledger_component == LedgerComponent.DELAYED_INDEX_BUCKET
              else COMPONENT_MANAGED_LEDGER)
    if component != wanted:
        return f"request says {request.ledger_component.value}, BookKeeper says component={component!r}"
    expected_ml = managed_ledger_name(request.topic_name)
    if meta.get(MANAGED_LEDGER_KEY) != expected_ml:
        return f"managed ledger differs: request {expected_ml!r}, BookKeeper {meta.get(MANAGED_LEDGER_KEY)!r}"
    cursor = meta.get(CURSOR_KEY)
    if request.ledger_component == LedgerComponent.MANAGED_LEDGER and cursor is not None:
        return f"request says data ledger, BookKeeper says cursor ledger of {cursor!r}"
    if request.ledger_component in CURSOR_COMPONENTS and cursor != request.cursor_name:
        return f"cursor differs: request {request.cursor_name!r}, BookKeeper {cursor!r}"
    return None
