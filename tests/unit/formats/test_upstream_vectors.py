"""The upstream-encoded samples (a copy of shared/vectors in tests/support/data/vectors) decode as expected.json says.

They were made with the upstream .proto definitions, so they check our own
.proto files (field numbers, types) and codecs against the real thing.  We also
re-encode each and expect the very same bytes: that is what writing a node back
after the mark phase relies on.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from metastore.formats import (
    CompressionType,
    LedgerLayout,
    decode_cursor,
    decode_ledger_metadata,
    decode_managed_ledger,
    encode_cursor,
    encode_ledger_metadata,
    encode_managed_ledger,
    ledger_id_from_path,
    ledger_path,
)

VECTORS = Path(__file__).resolve().parents[2] / "support" / "data" / "vectors"


@pytest.fixture(scope="module")
def expected() -> dict:
    return json.loads((VECTORS / "expected.json").read_text())


ML_FILES = {
    "managed-ledger.none.bin": CompressionType.NONE,
    "managed-ledger.zlib.bin": CompressionType.ZLIB,
    "managed-ledger.lz4.bin": CompressionType.LZ4,
    "managed-ledger.zstd.bin": CompressionType.ZSTD,
    "managed-ledger.snappy.bin": CompressionType.SNAPPY,
}


def test_every_vector_file_is_covered() -> None:
    covered = {*ML_FILES, "cursor.none.bin", "cursor.zstd.bin", "bk-ledger.v3.bin"}
    assert {p.name for p in VECTORS.glob("*.bin")} == covered


@pytest.mark.parametrize(("name", "compression"), ML_FILES.items())
def test_managed_ledger_vectors(name: str, compression: CompressionType, expected: dict) -> None:
    data = (VECTORS / name).read_bytes()
    info = decode_managed_ledger(data)
    want = expected["managed-ledger"]
    assert info.compression is compression
    assert info.ledger_ids() == want["ledgers"]
    assert info.terminated_position == tuple(want["terminatedPosition"])
    offloaded = want["offloaded"]
    [ledger] = [li for li in info.ledgers if li.ledger_id == offloaded["ledgerId"]]
    ctx = ledger.offload_context
    assert ctx is not None
    assert (ctx.uid_msb, ctx.uid_lsb) == (offloaded["uidMsb"], offloaded["uidLsb"])
    assert ctx.driver_name == offloaded["driverName"]
    assert ctx.driver_metadata["bucket"] == offloaded["bucket"]
    assert ctx.bookkeeper_deleted is offloaded["bookkeeperDeleted"]
    assert all(li.offload_context is None for li in info.ledgers if li is not ledger)
    assert not info.unknown and not ledger.unknown
    # Written back with the compression it was read with, to the byte.
    assert encode_managed_ledger(info) == data


@pytest.mark.parametrize("name", ["cursor.none.bin", "cursor.zstd.bin"])
def test_cursor_vectors(name: str, expected: dict) -> None:
    data = (VECTORS / name).read_bytes()
    info = decode_cursor(data)
    want = expected["cursor"]
    assert info.compression is (CompressionType.ZSTD if "zstd" in name else CompressionType.NONE)
    assert info.cursors_ledger_id == want["cursorsLedgerId"]
    assert info.state_in_metadata_store
    assert info.mark_delete == tuple(want["markDelete"])
    assert [(*r.lower, *r.upper) for r in info.individual_deleted_messages] == [
        tuple(r) for r in want["ranges"]
    ]
    [batch] = info.batched_entry_deletion_index_info
    assert batch.position == tuple(want["batch"]["position"])
    assert batch.unacked == want["batch"]["unackedIndexes"]
    assert encode_cursor(info) == data


def test_bk_ledger_vector(expected: dict) -> None:
    data = (VECTORS / "bk-ledger.v3.bin").read_bytes()
    meta = decode_ledger_metadata(data)
    want = expected["bk-ledger"]
    assert meta.format_version == want["formatVersion"]
    assert meta.state == want["state"]
    assert meta.last_entry_id == want["lastEntryId"]
    assert meta.ctime is want["ctime"] is None
    assert meta.ctime_or(1234) == 1234
    assert {k: v.decode() for k, v in meta.custom_metadata.items()} == want["customMetadata"]
    assert meta.custom_text("component") == "schema"
    assert encode_ledger_metadata(meta) == data


def test_bk_path_vectors(expected: dict) -> None:
    for ledger_id, path in expected["bk-paths"].items():
        assert ledger_path("/ledgers", int(ledger_id), LedgerLayout.HIERARCHICAL) == path
        assert ledger_id_from_path("/ledgers", path, LedgerLayout.HIERARCHICAL) == int(ledger_id)
