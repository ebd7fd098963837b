"""The watcher's one question before it requests a leak: is the departed copy still stored?  Asked of
the embedded SQLite store and the filesystem offloader, located exactly as the delete phase locates
a copy (the topic names the managed ledger a filesystem offload lives under)."""

from __future__ import annotations

import shutil
from pathlib import Path

from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata
from deletion_service.leak_watcher.departures import departures
from deletion_service.leak_watcher.sightings import reading_of
from deletion_service.leak_watcher.storage import still_stored
from deletion_service.protocol.references import TopicMetadata
from deletion_service.testing.offload_objects import build_mapfile_data, pulsar_ledger_metadata
from metastore import open_store
from metastore.formats import LedgerInfo, ManagedLedgerInfo, OffloadContext, managed_ledger_name
from offloaders.filesystem import mapfile_dir_name
from offloaders.interface import java_uuid
from offloaders.registry import OffloaderSettings

TOPIC = "persistent://t/ns/orders"


def test_a_copy_is_stored_until_it_is_deleted_and_one_that_cannot_be_checked_counts_as_stored(tmp_path: Path) -> None:
    base = tmp_path / "offload"
    part = base / managed_ledger_name(TOPIC) / mapfile_dir_name(7, java_uuid(3, 4))
    part.mkdir(parents=True)
    (part / "data").write_bytes(build_mapfile_data(pulsar_ledger_metadata(managed_ledger_name(TOPIC), entries=1,
                                                                          size=5), [b"entry"]))
    (part / "index").write_bytes(b"")
    listed = [LedgerInfo(7, offload_context=OffloadContext(uid_msb=3, uid_lsb=4, complete=True,
                                                           driver_name="filesystem", driver_metadata={})),
              LedgerInfo(8)]
    before = reading_of([TopicMetadata(TOPIC, ManagedLedgerInfo(listed), {}, None, None)])
    after = reading_of([TopicMetadata(TOPIC, ManagedLedgerInfo([]), {}, None, None)])
    requests = {(r.ledger_type.value, r.ledger_id): r for d in departures(before, after, 1) for r in d.requests}
    assert set(requests) == {("LEDGER", 7), ("OFFLOAD_LEDGER", 7), ("LEDGER", 8)}

    with open_store(f"sqlite:///{tmp_path / 'm.db'}") as store:
        w = ClusterWriter(store)
        w.ensure_layout()
        w.bk_ledger(8, pulsar_custom_metadata(TOPIC))
        check = still_stored(store, "/ledgers", "hierarchical", OffloaderSettings(filesystem_base_dir=base))
        assert check(requests[("LEDGER", 8)]) and not check(requests[("LEDGER", 7)])
        assert check(requests[("OFFLOAD_LEDGER", 7)])
        shutil.rmtree(part)
        assert not check(requests[("OFFLOAD_LEDGER", 7)])  # the broker's offload delete worked
        no_driver = still_stored(store, "/ledgers", "hierarchical", OffloaderSettings())  # filesystem not set up
        assert no_driver(requests[("OFFLOAD_LEDGER", 7)])  # cannot tell: requested, the delete phase decides
