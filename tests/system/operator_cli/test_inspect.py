"""``ledger-deletion inspect`` through the real CLI: the contract's JSON, tables, and bad input."""

from __future__ import annotations

import json
import struct
import time
import zlib
from pathlib import Path

import pytest

from metastore import ABSENT, open_store
from metastore.interface import DEFAULT_MAX_REQUEST_BYTES
from tests.support.cli_runner import run_cli

VECTORS = Path(__file__).resolve().parents[2] / "support" / "data" / "vectors"
EXPECTED = json.loads((VECTORS / "expected.json").read_text())


@pytest.mark.parametrize("compression", ["none", "zlib", "lz4", "zstd", "snappy"])
def test_managed_ledger_file_json(compression: str) -> None:
    r = run_cli("inspect", "managed-ledger", "--file", str(VECTORS / f"managed-ledger.{compression}.bin"), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    exp = EXPECTED["managed-ledger"]
    assert [ledger["ledgerId"] for ledger in out["ledgers"]] == exp["ledgers"]
    offloaded = next(ledger for ledger in out["ledgers"] if ledger["ledgerId"] == exp["offloaded"]["ledgerId"])
    ctx = offloaded["offloadContext"]
    assert set(ctx) == {"uidMsb", "uidLsb", "complete", "bookkeeperDeleted", "driverName", "driverMetadata"}
    assert (ctx["uidMsb"], ctx["uidLsb"], ctx["driverName"]) == (
        exp["offloaded"]["uidMsb"], exp["offloaded"]["uidLsb"], exp["offloaded"]["driverName"])
    assert ctx["driverMetadata"]["bucket"] == exp["offloaded"]["bucket"]
    assert ctx["bookkeeperDeleted"] is True
    assert out["terminatedPosition"] == dict(zip(["ledgerId", "entryId"], exp["terminatedPosition"], strict=True))
    assert set(out) == {"ledgers", "properties", "terminatedPosition"}
    assert all(ledger["offloadContext"] is None for ledger in out["ledgers"] if ledger is not offloaded)


@pytest.mark.parametrize("name", ["cursor.none.bin", "cursor.zstd.bin"])
def test_cursor_file_json(name: str) -> None:
    r = run_cli("--json", "inspect", "cursor", "--file", str(VECTORS / name))  # common option before
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    exp = EXPECTED["cursor"]
    assert out["cursorsLedgerId"] == exp["cursorsLedgerId"]
    assert out["markDeletePosition"] == {"ledgerId": exp["markDelete"][0], "entryId": exp["markDelete"][1]}
    assert out["individualDeletedMessages"] == [
        {"lower": {"ledgerId": a, "entryId": b}, "upper": {"ledgerId": c, "entryId": d}} for a, b, c, d in exp["ranges"]
    ]
    [batch] = out["batchedEntryDeletionIndexInfo"]
    assert batch["position"] == {"ledgerId": exp["batch"]["position"][0], "entryId": exp["batch"]["position"][1]}
    assert batch["unackedIndexes"] == exp["batch"]["unackedIndexes"]
    assert set(out) == {"cursorsLedgerId", "markDeletePosition", "individualDeletedMessages",
                        "batchedEntryDeletionIndexInfo", "properties", "cursorProperties", "lastActive", "ackState"}
    # the default budget (5 MiB), capped at what ZooKeeper takes in one request, less the path's headroom
    assert out["ackState"]["budgetBytes"] == DEFAULT_MAX_REQUEST_BYTES - 1024
    assert out["ackState"]["ranges"] == len(exp["ranges"]) and out["ackState"]["overBudget"] is False


def test_bk_ledger_file_json() -> None:
    r = run_cli("inspect", "bk-ledger", "--file", str(VECTORS / "bk-ledger.v3.bin"), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    exp = EXPECTED["bk-ledger"]
    assert (out["formatVersion"], out["state"], out["lastEntryId"], out["ctime"]) == (
        exp["formatVersion"], exp["state"], exp["lastEntryId"], exp["ctime"])
    assert out["customMetadata"] == exp["customMetadata"]
    assert set(out) == {"formatVersion", "state", "length", "lastEntryId", "ensembleSize", "writeQuorumSize",
                        "ackQuorumSize", "ctime", "customMetadata"}


def test_tables_for_people() -> None:
    r = run_cli("inspect", "cursor", "--file", str(VECTORS / "cursor.zstd.bin"))
    assert r.returncode == 0, r.stderr
    assert "mark-delete position" in r.stdout and "4:9" in r.stdout
    assert "63 unacked: 0-1, 3-62, 64" in r.stdout  # runs, not sixty-three numbers
    r = run_cli("inspect", "managed-ledger", "--file", str(VECTORS / "managed-ledger.lz4.bin"))
    assert r.returncode == 0 and "3000000000" in r.stdout and "LZ4" in r.stdout


@pytest.mark.parametrize("ledger_id", sorted(EXPECTED["bk-paths"], key=int))
def test_bk_path(ledger_id: str) -> None:
    r = run_cli("inspect", "bk-path", ledger_id)
    assert r.returncode == 0 and r.stdout == EXPECTED["bk-paths"][ledger_id] + "\n"


def test_bk_path_long_layout_and_max_id() -> None:
    assert run_cli("inspect", "bk-path", "42", "--layout", "long").stdout.strip() == "/ledgers/000/0000/0000/0000/L0042"
    assert run_cli("inspect", "bk-path", str(2**63 - 1)).stdout.strip() == "/ledgers/922/3372/0368/5477/L5807"
    run_cli("inspect", "bk-path", "--", "-1").assert_one_line_error(2, "ledger -1")
    run_cli("inspect", "bk-path", str(2**63)).assert_one_line_error(2, f"ledger {2**63}")
    assert run_cli("inspect", "bk-path", "5", "--layout", "flat").returncode == 2


def test_read_from_zookeeper(zk_url: str, zookeeper) -> None:  # noqa: ANN001
    bk_url = f"{zookeeper.url}/bk-{time.time_ns()}"
    ml_path = "/managed-ledgers/public/default/persistent/orders"
    with open_store(zk_url) as store:
        store.put(ml_path, (VECTORS / "managed-ledger.snappy.bin").read_bytes(), ABSENT)
        store.put(ml_path + "/sub", (VECTORS / "cursor.none.bin").read_bytes(), ABSENT)
    before = int(time.time() * 1000) - 5000
    with open_store(bk_url) as bk:
        bk.put("/ledgers/00/0000/L0042", (VECTORS / "bk-ledger.v3.bin").read_bytes(), ABSENT)

    r = run_cli("inspect", "managed-ledger", "--path", ml_path, "--metadata-store", zk_url, "--json")
    assert r.returncode == 0, r.stderr
    assert [x["ledgerId"] for x in json.loads(r.stdout)["ledgers"]] == EXPECTED["managed-ledger"]["ledgers"]
    r = run_cli("inspect", "cursor", "--path", ml_path + "/sub", "--metadata-store", zk_url, "--json")
    assert json.loads(r.stdout)["markDeletePosition"] == {"ledgerId": 4, "entryId": 9}
    # bk-ledger reads the BookKeeper store; the ledger records no ctime, so the znode's is shown.
    r = run_cli("inspect", "bk-ledger", "--path", "/ledgers/00/0000/L0042", "--metadata-store", zk_url,
                "--bookkeeper-metadata-store", bk_url, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ctime"] >= before
    run_cli("inspect", "bk-ledger", "--path", "/ledgers/00/0000/L0042", "--metadata-store", zk_url,
            ).assert_one_line_error(1, "no node at /ledgers/00/0000/L0042")


def _compressed_header(compression_type: int, payload: bytes, uncompressed: int) -> bytes:
    # ManagedLedgerInfoMetadata built by hand: field 1 varint, field 2 varint.
    meta = bytes([0x08, compression_type, 0x10]) + _varint(uncompressed)
    return b"\x47\x78" + struct.pack(">i", len(meta)) + meta + payload


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


BAD_INPUTS = {
    "garbage": (b"\xff\xfe\xfd\xfc" * 8, "managed-ledger"),
    "truncated": ((VECTORS / "managed-ledger.zstd.bin").read_bytes()[:40], "managed-ledger"),
    "wrong-magic": (b"\x47\x79" + (VECTORS / "managed-ledger.zstd.bin").read_bytes()[2:], "managed-ledger"),
    "unknown-compression": (_compressed_header(9, b"xx", 2), "managed-ledger"),
    "size-mismatch": (_compressed_header(2, zlib.compress(b"\x08\x01"), 99), "managed-ledger"),
    "bk-v1": (b"BookieMetadataFormatVersion\t1\nquorumSize: 2\n", "bk-ledger"),
    "bk-garbage": (b"not a ledger at all", "bk-ledger"),
    "cursor-truncated": ((VECTORS / "cursor.zstd.bin").read_bytes()[:-5], "cursor"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_clear_line(case: str, tmp_path: Path) -> None:
    data, kind = BAD_INPUTS[case]
    f = tmp_path / f"{case}.bin"
    f.write_bytes(data)
    line = run_cli("inspect", kind, "--file", str(f)).assert_one_line_error(1, f"cannot decode file {f} as {kind}")
    assert len(line) < 400


def test_usage_mistakes(tmp_path: Path) -> None:
    run_cli("inspect", "cursor").assert_one_line_error(2, "exactly one of --path")
    run_cli("inspect", "cursor", "--file", str(tmp_path / "absent.bin")).assert_one_line_error(
        1, "cannot read", "absent.bin")


def test_digest_credentials_come_from_the_config(zk_url: str, zookeeper, tmp_path: Path) -> None:  # noqa: ANN001
    from kazoo.client import KazooClient
    from kazoo.security import make_digest_acl

    chroot = "/" + zk_url.split("/", 3)[3]
    raw = KazooClient(zookeeper.hosts)
    raw.start(5)
    raw.add_auth("digest", "pulsar:pw")
    raw.create(f"{chroot}/c", (VECTORS / "cursor.none.bin").read_bytes(),
               acl=[make_digest_acl("pulsar", "pw", all=True)], makepath=True)
    raw.stop()
    raw.close()
    secret = tmp_path / "digest"
    secret.write_text("pulsar:pw\n")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'metadataStoreDigestFile = "{secret}"\n')
    r = run_cli("inspect", "cursor", "--path", "/c", "--metadata-store", zk_url, "--config", str(cfg), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["cursorsLedgerId"] == -1
    run_cli("inspect", "cursor", "--path", "/c", "--metadata-store", zk_url).assert_one_line_error(
        1, "digest credentials")
