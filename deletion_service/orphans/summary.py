"""What a scan concluded, small enough for the driver: counts, per-namespace totals, an age histogram.

Reconciliation computes these with Spark aggregations (never by collecting the
result tables); the JSON summary, the CLI table and ``report.html`` all read them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from deletion_service.clock_text import rfc3339


@dataclass(frozen=True)
class ScanSummary:
    orphan_ledgers: int
    orphan_offloaded_objects: int
    missing_ledgers: int
    orphan_ledger_bytes: int  # reclaimable from BookKeeper
    orphan_object_bytes: int  # reclaimable from tiered storage
    scanned_ledgers: int
    references: int
    scanned_objects: int
    min_age_s: int
    scanned_at_ms: int
    #: orphan ledgers per ``reference_model.LedgerKind`` value (every kind, 0 included), and their bytes
    orphan_ledgers_by_kind: dict[str, int] = field(default_factory=dict)
    orphan_ledger_bytes_by_kind: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, int | str | dict[str, int]]:
        """The contract's integer counts first (``orphanLedgers``, ``orphanOffloadedObjects``,
        ``missingLedgers``), then the rest, camelCase (the per-kind counts as objects); the moment of
        the scan as ``scannedAt``, RFC 3339 in UTC like every moment in the CLI's JSON."""
        out: dict[str, int | str | dict[str, int]] = {
            "orphanLedgers": self.orphan_ledgers, "orphanOffloadedObjects": self.orphan_offloaded_objects,
            "missingLedgers": self.missing_ledgers}
        for key, value in asdict(self).items():
            if key == "scanned_at_ms":
                out["scannedAt"] = rfc3339(value)
                continue
            camel = key.split("_")[0] + "".join(w.title() for w in key.split("_")[1:])
            out.setdefault(camel, value)
        return out


@dataclass(frozen=True)
class NamespaceTotals:
    """Orphans of one namespace (from the ledger's own ``pulsar/managed-ledger``; "(unknown)" if none)."""

    tenant: str
    namespace: str  # tenant/ns
    orphan_ledgers: int
    orphan_ledger_bytes: int
    orphan_objects: int
    orphan_object_bytes: int


@dataclass(frozen=True)
class AgeBucket:
    label: str  # e.g. "1–2 d", "> 90 d"
    lower_s: int  # inclusive
    upper_s: int | None  # exclusive; None: open-ended
    orphan_ledgers: int
    orphan_ledger_bytes: int


@dataclass(frozen=True)
class MissingLedger:
    ledger_id: int
    kind: str  # reference_model.ReferenceKind value
    topic: str
    detail: str | None


@dataclass(frozen=True)
class ReportData:
    """Everything ``report.html`` shows; missing ledgers (data-loss alarms) come first there."""

    summary: ScanSummary
    by_namespace: list[NamespaceTotals] = field(default_factory=list)
    age_histogram: list[AgeBucket] = field(default_factory=list)
    missing: list[MissingLedger] = field(default_factory=list)  # the first MISSING_SHOWN, by ledger id
    largest_orphans: list[dict] = field(default_factory=list)  # the biggest orphan ledgers, rows of ORPHAN_LEDGERS


#: How many missing ledgers the report lists by name (all are in missing_ledgers.parquet).
MISSING_SHOWN = 1000
