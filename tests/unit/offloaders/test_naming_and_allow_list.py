"""Pure parts of the offloaders: object naming, allow-list, registry, index formats."""

from __future__ import annotations

import pytest

from deletion_service.delete_phase.rules.verify_offload import (
    IndexExpectation,
    Verification,
    judge_segment,
    judge_source_metadata,
)
from deletion_service.testing.offload_objects import (
    build_index_v1,
    build_index_v2,
    build_mapfile_data,
    encode_ledger_info,
    pulsar_ledger_metadata,
)
from offloaders import (
    OffloaderSettings,
    OffloadNotAllowedError,
    OffloadTarget,
    OffloadTargetError,
    SegmentRef,
    java_uuid,
    offloader_for,
)
from offloaders.allow_list import AllowList, decide, normalize_endpoint
from offloaders.filesystem import FileSystemOffloader
from offloaders.index_format import (
    IndexFormatError,
    parse_index_v1,
    parse_index_v2,
    read_mapfile_metadata_record,
)
from offloaders.s3 import S3Offloader, chunks

ML = "public/default/persistent/orders"


@pytest.mark.parametrize(("msb", "lsb", "text"), [
    (0, 0, "00000000-0000-0000-0000-000000000000"),
    (-1, -1, "ffffffff-ffff-ffff-ffff-ffffffffffff"),
    (-(1 << 63), 1, "80000000-0000-0000-0000-000000000001"),
    ((1 << 63) - 1, -(1 << 63), "7fffffff-ffff-ffff-8000-000000000000"),
    # the RFC 4122 example as Java's new UUID(msb, lsb) holds it (both halves negative)
    (-568210367123287600, -6384696206158828554, "f81d4fae-7dec-11d0-a765-00a0c91e6bf6"),
    (1314564453825188563, -6605018797301088256, "123e4567-e89b-12d3-a456-426614174000"),
])
def test_java_uuid_matches_java_to_string(msb: int, lsb: int, text: str) -> None:
    assert java_uuid(msb, lsb) == text


@pytest.mark.parametrize(("msb", "lsb"), [(1 << 63, 0), (0, -(1 << 63) - 1)])
def test_java_uuid_rejects_values_outside_int64(msb: int, lsb: int) -> None:
    with pytest.raises(ValueError, match="64-bit"):
        java_uuid(msb, lsb)


def test_object_names_per_ledger_and_segments() -> None:
    s3 = S3Offloader()
    per_ledger = OffloadTarget("aws-s3", {"bucket": "b"}, -1, -2, 42)
    assert s3.object_names(per_ledger) == [
        "ffffffff-ffff-ffff-ffff-fffffffffffe-ledger-42",
        "ffffffff-ffff-ffff-ffff-fffffffffffe-ledger-42-index",
    ]
    segments = (SegmentRef(0, 1), SegmentRef(-1, 0))
    streaming = OffloadTarget("aws-s3", {"bucket": "b"}, 0, 0, 7, segments=segments)
    assert s3.object_names(streaming) == [
        "00000000-0000-0000-0000-000000000001", "00000000-0000-0000-0000-000000000001-index",
        "ffffffff-ffff-ffff-0000-000000000000", "ffffffff-ffff-ffff-0000-000000000000-index",
    ]


def test_target_from_message_offload_context() -> None:
    ctx = {"uidMsb": -5, "uidLsb": 9, "driverName": "S3", "driverMetadata": {"bucket": "b", "region": "r"},
           "segments": [{"uidMsb": 1, "uidLsb": 2}], "unknownField": True}
    t = OffloadTarget.from_offload_context(12, ctx, managed_ledger_name=ML)
    assert (t.driver_name, t.uid_msb, t.uid_lsb, t.ledger_id) == ("S3", -5, 9, 12)
    assert t.driver_metadata == {"bucket": "b", "region": "r"}
    assert t.segments == (SegmentRef(1, 2),)
    with pytest.raises(ValueError, match="offloadContext"):
        OffloadTarget.from_offload_context(12, {"uidMsb": 1})


# ------------------------------------------------------------------ allow-list


def test_allow_list_defaults_allow_s3_family_and_filesystem_any_bucket() -> None:
    allow = AllowList.of()
    for driver in ("aws-s3", "S3", "s3", "aliyun-oss", "filesystem"):
        assert decide(allow, driver, "any-bucket", "http://anywhere:9000"), driver


@pytest.mark.parametrize("driver", ["google-cloud-storage", "azureblob", "transient", "", "hdfs"])
def test_unknown_or_non_s3_drivers_are_never_allowed(driver: str) -> None:
    allow = AllowList.of(drivers=[driver or "x", "aws-s3"])
    decision = decide(allow, driver, "b", "")
    assert not decision
    assert "unknown offload driver" in decision.reason


def test_allow_list_restricts_drivers_buckets_endpoints() -> None:
    allow = AllowList.of(drivers=["aws-s3"], buckets=["offload"], endpoints=["HTTPS://S3.Example.com:443/"])
    assert decide(allow, "AWS-S3", "offload", "https://s3.example.com")
    assert "offloadAllowedDrivers" in decide(allow, "S3", "offload", "https://s3.example.com").reason
    assert "offloadAllowedBuckets" in decide(allow, "aws-s3", "other", "https://s3.example.com").reason
    assert "offloadAllowedEndpoints" in decide(allow, "aws-s3", "offload", "https://evil.example.com").reason
    # no endpoint = provider default, matched only by the explicit "default" entry
    assert not decide(allow, "aws-s3", "offload", "")
    assert decide(AllowList.of(endpoints=["default"]), "aws-s3", "offload", "")
    assert not decide(allow, "aws-s3", "", "https://s3.example.com")  # a target must name its bucket


def test_allow_list_from_camel_case_config() -> None:
    allow = AllowList.from_config({"offloadAllowedDrivers": "S3, filesystem",
                                   "offloadAllowedBuckets": ["a", "b"],
                                   "offloadAllowedEndpoints": "http://127.0.0.1:9000"})
    assert allow.drivers == {"s3", "filesystem"}
    assert allow.buckets == {"a", "b"}
    assert allow.endpoints == {"http://127.0.0.1:9000"}


def test_normalize_endpoint() -> None:
    assert normalize_endpoint("http://Host:80/") == "http://host"
    assert normalize_endpoint("minio:9000") == "https://minio:9000"
    assert normalize_endpoint("minio:443") == "https://minio"
    assert normalize_endpoint(None) == ""


# ------------------------------------------------------------------ registry


def test_registry_unknown_driver_is_refused_clearly(tmp_path) -> None:
    with pytest.raises(OffloadNotAllowedError, match="unknown offload driver 'google-cloud-storage'"):
        offloader_for("google-cloud-storage", OffloaderSettings())
    with pytest.raises(OffloadNotAllowedError, match="not in offloadAllowedDrivers"):
        offloader_for("aliyun-oss", {"offloadAllowedDrivers": ["aws-s3"]})


def test_registry_builds_and_caches(tmp_path) -> None:
    settings = OffloaderSettings(filesystem_base_dir=tmp_path)
    s3 = offloader_for("aws-s3", settings)
    assert isinstance(s3, S3Offloader)
    assert offloader_for("S3", settings) is s3
    assert isinstance(offloader_for("filesystem", settings), FileSystemOffloader)
    with pytest.raises(OffloadTargetError, match="base directory"):
        offloader_for("filesystem", OffloaderSettings())


def test_offloader_refuses_a_target_of_another_family() -> None:
    with pytest.raises(OffloadNotAllowedError):
        S3Offloader().object_names(OffloadTarget("filesystem", {}, 1, 1, 1))


def test_delete_batches_respect_the_s3_limit() -> None:
    sizes = [len(c) for c in chunks(list(range(2501)))]
    assert sizes == [1000, 1000, 501]


# ------------------------------------------------------------------ index formats


def test_index_v1_round_trip_and_judging() -> None:
    meta = pulsar_ledger_metadata(ML, entries=10, size=1234, ctime_ms=1_700_000_000_000)
    source = parse_index_v1(build_index_v1(meta, entries=3))
    assert source.managed_ledger_name == ML
    assert (source.last_entry_id, source.length, source.ctime_ms) == (9, 1234, 1_700_000_000_000)

    ok = judge_source_metadata(source, 5, "x-index", IndexExpectation(entries=10, size=1234), ML)
    assert ok.outcome is Verification.VERIFIED
    other = judge_source_metadata(source, 5, "x-index", None, "public/default/persistent/other")
    assert other.outcome is Verification.MISMATCH and "managed ledger" in other.detail
    shorter = judge_source_metadata(source, 5, "x-index", IndexExpectation(entries=11), None)
    assert shorter.outcome is Verification.MISMATCH and "lastEntryId" in shorter.detail
    nothing = judge_source_metadata(source, 5, "x-index", None, None)
    assert nothing.outcome is Verification.UNVERIFIABLE


def test_index_v1_rejects_wrong_magic_and_truncation() -> None:
    good = build_index_v1(pulsar_ledger_metadata(ML, entries=1, size=1))
    with pytest.raises(IndexFormatError, match="magic"):
        parse_index_v1(b"\x00" * 4 + good[4:])
    with pytest.raises(IndexFormatError):
        parse_index_v1(good[:10])
    with pytest.raises(IndexFormatError):
        parse_index_v2(good)  # a per-ledger index is not a streaming one


def test_index_v2_names_its_ledgers() -> None:
    raw = build_index_v2({7: encode_ledger_info(7, 5, 50), 8: encode_ledger_info(8, 2, 20)})
    ledgers = parse_index_v2(raw)
    assert sorted(ledgers) == [7, 8]
    assert ledgers[7].entries == 5
    absent = judge_segment(ledgers, 9, "s-index", None)
    assert absent.outcome is Verification.MISMATCH and "does not hold ledger 9" in absent.detail
    shared_with_8 = judge_segment(ledgers, 7, "s-index", None)
    assert shared_with_8.outcome is Verification.MISMATCH and "also holds ledgers [8]" in shared_with_8.detail
    shared = IndexExpectation(managed_ledger_name="t/ns/persistent/x", allow_shared_segment_ledgers=frozenset({8}))
    # holding the ledger proves nothing about the topic: without the owner's name, unverifiable
    assert judge_segment(ledgers, 7, "s-index", shared).outcome is Verification.UNVERIFIABLE
    check = judge_segment(ledgers, 7, "s-index", shared, owner_ml_name="t/ns/persistent/x")
    assert check.outcome is Verification.VERIFIED and "holds ledger 7" in check.detail
    victim = judge_segment(ledgers, 7, "s-index", shared, owner_ml_name="victim/ns/persistent/x")
    assert victim.outcome is Verification.MISMATCH and "victim" in victim.detail


@pytest.mark.parametrize("compressed", [False, True])
def test_mapfile_metadata_record(compressed: bool) -> None:
    meta = pulsar_ledger_metadata(ML, entries=2, size=20)
    data = build_mapfile_data(meta, [b"e0", b"e1"], record_compressed=compressed)
    assert read_mapfile_metadata_record(data) == meta
    with pytest.raises(IndexFormatError, match="SequenceFile"):
        read_mapfile_metadata_record(b"NOPE" + data[4:])


def test_filesystem_paths_cannot_escape_the_base_dir(tmp_path) -> None:
    fs = FileSystemOffloader(tmp_path / "offload")
    (tmp_path / "offload").mkdir()
    for bad_ml in ("../etc", "/abs/path", "a/../../b", "a//b"):
        with pytest.raises(OffloadNotAllowedError):
            fs.object_names(OffloadTarget("filesystem", {}, 1, 2, 3, managed_ledger_name=bad_ml))
    with pytest.raises(OffloadNotAllowedError, match="outside"):
        fs.object_names(OffloadTarget("filesystem", {"storageBasePath": str(tmp_path)}, 1, 2, 3,
                                      managed_ledger_name=ML))
    with pytest.raises(OffloadTargetError, match="not a local path"):
        fs.object_names(OffloadTarget("filesystem", {"storageBasePath": "hdfs://nn/x"}, 1, 2, 3,
                                      managed_ledger_name=ML))
