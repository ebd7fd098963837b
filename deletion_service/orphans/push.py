"""A scan's counts for Prometheus: pushed to a Pushgateway, since ``scan-orphans`` is a batch job.

A CronJob's pod is gone before any scrape could find it, so the job pushes its result
(the Pushgateway keeps the last push per job until the next one replaces it) and
Prometheus scrapes the gateway with ``honor_labels: true``. Missing ledgers are the
alarm (``LedgerDeletionMissingLedgers``); the completion time tells a scan that stopped
running from one that keeps finding nothing.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, push_to_gateway

from deletion_service.errors import UserError
from deletion_service.metrics import PREFIX, PulsarStyle
from deletion_service.orphans.summary import ScanSummary

#: The Pushgateway's grouping key: one group per cluster's scan, replaced by each push.
JOB = "ledger-deletion-scan-orphans"


def scan_registry(summary: ScanSummary) -> CollectorRegistry:
    registry = CollectorRegistry()
    for name, doc, value in (
        ("missing_ledgers", "Ledgers referenced by metadata but absent from storage (data loss)",
         summary.missing_ledgers),
        ("orphan_ledgers", "Pulsar ledgers nothing references, older than --min-age", summary.orphan_ledgers),
        ("orphan_ledger_bytes", "Bytes the orphan ledgers hold in BookKeeper", summary.orphan_ledger_bytes),
        ("orphan_offloaded_objects", "Offloaded objects nothing references", summary.orphan_offloaded_objects),
        ("orphan_object_bytes", "Bytes the orphan offloaded objects hold", summary.orphan_object_bytes),
        ("scanned_ledgers", "Ledgers the scan listed", summary.scanned_ledgers),
        ("completed_timestamp_seconds", "When the scan's inventories were taken (Unix time)",
         summary.scanned_at_ms / 1000),
    ):
        Gauge(f"{PREFIX}_scan_{name}", doc, registry=registry).set(value)
    by_kind = Gauge(f"{PREFIX}_scan_orphan_ledgers_by_kind", "Orphan ledgers per kind (data, cursor, schema, "
                    "compacted, delayed-bucket, other)", ["kind"], registry=registry)
    for kind, n in summary.orphan_ledgers_by_kind.items():
        by_kind.labels(kind=kind).set(n)
    return registry


def push_summary(gateway: str, summary: ScanSummary, timeout_s: float = 30, cluster: str = "standalone") -> None:
    """Replace this job's group on the Pushgateway at ``gateway`` (``http://host:9091``); every sample
    carries ``cluster`` (Pulsar's ``clusterName``), as the daemon's do."""
    try:
        push_to_gateway(gateway, job=JOB, registry=PulsarStyle(scan_registry(summary), cluster), timeout=timeout_s)
    except OSError as e:  # URLError, HTTPError, refused, timed out
        raise UserError(f"the scan finished, but pushing its counts to the Pushgateway at {gateway} failed: {e}") \
            from e
