"""Ledgers of one topic for a daemon to delete: seeded in a metadata store (with forged ones of
another topic beside them), written as an ``enqueue --from-file`` request file, and which are still present."""

from __future__ import annotations

import json
from pathlib import Path

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from metastore import open_store
from metastore.formats import ledger_path

TOPIC = "persistent://t/ns/daemon"


def seed(url: str, ids: range, forged: range = range(0)) -> None:
    with open_store(url) as store:
        w = ClusterWriter(store)
        w.ensure_layout()
        for lid in ids:
            w.bk_ledger(lid, pulsar_custom_metadata(TOPIC))
        for lid in forged:
            w.bk_ledger(lid, pulsar_custom_metadata("persistent://t/ns/someone-else"))


def present(url: str, ids: range) -> list[int]:
    with open_store(url) as store:
        return [lid for lid in ids if store.get(ledger_path("/ledgers", lid, "hierarchical")) is not None]


def request_file(path: Path, ids: range) -> Path:
    path.write_text(
        "".join(
            json.dumps(
                {
                    "topicName": TOPIC,
                    "ledgerComponent": "MANAGED_LEDGER",
                    "ledgerType": "LEDGER",
                    "ledgerId": lid,
                    "reason": "trim",
                }
            )
            + "\n"
            for lid in ids
        )
    )
    return path
