"""The S3-family offloader against a real ``moto_server`` process.

Faults the real server cannot produce on demand (500, 503 SlowDown, a hang past
the client's read timeout, a dropped connection) come from the loopback
:class:`tests.support.fault_proxy.FaultProxy` placed between the client and moto.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator

import boto3
import pytest

from deletion_service.delete_phase.rules.verify_offload import IndexCheck, IndexExpectation, Verification
from deletion_service.delete_phase.storage.offload_index import verify_offloaded_copy
from deletion_service.testing.offload_objects import (
    build_index_v1,
    build_index_v2,
    encode_ledger_info,
    encode_ledger_metadata_format,
    pulsar_ledger_metadata,
)
from metastore.formats.custom_metadata import FORMAT_VERSION_KEY
from offloaders import (
    ObjectDeleteOutcome,
    OffloadNotAllowedError,
    OffloadTarget,
    OffloadTargetError,
    OffloadTransientError,
    SegmentRef,
)
from offloaders.allow_list import AllowList
from offloaders.s3 import S3Offloader
from tests.support.fault_proxy import Fault, FaultProxy
from tests.support.harness import MotoS3Server

ML = "public/default/persistent/orders"
#: What upstream's DataBlockUtils.addVersionInfo stamps on every object (jclouds lower-cases keys).
UPSTREAM_META = {FORMAT_VERSION_KEY: "1", "s3managedledgeroffloadersoftwareversion": "3.0.0"}


@pytest.fixture
def bucket(s3_server: MotoS3Server) -> str:
    name = f"offload-{uuid.uuid4().hex[:10]}"
    raw_client(s3_server.endpoint).create_bucket(Bucket=name)
    return name


@pytest.fixture
def offloader() -> S3Offloader:
    # A fresh offloader per test: no pooled connection survives a server restart.
    return S3Offloader(connect_timeout=1, read_timeout=1)


def raw_client(endpoint: str):  # noqa: ANN201 - boto3 client type is generated
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")


def target(endpoint: str, bucket: str, ledger_id: int = 42, msb: int = -4_000_000_000, lsb: int = -7,
           segments: tuple[SegmentRef, ...] = (), driver: str = "aws-s3",
           endpoint_key: str = "serviceEndpoint") -> OffloadTarget:
    return OffloadTarget(driver, {"bucket": bucket, "region": "us-east-1", endpoint_key: endpoint},
                         msb, lsb, ledger_id, segments, managed_ledger_name=ML)


def put(endpoint: str, bucket: str, key: str, body: bytes = b"x", meta: dict[str, str] | None = None) -> None:
    raw_client(endpoint).put_object(Bucket=bucket, Key=key, Body=body, Metadata=meta or {})


def keys(endpoint: str, bucket: str) -> set[str]:
    return {o["Key"] for o in raw_client(endpoint).list_objects_v2(Bucket=bucket).get("Contents", [])}


def verify(offloader: S3Offloader, t: OffloadTarget, expect: IndexExpectation | None = None) -> IndexCheck:
    """Read the target's indexes and judge them, as the delete phase does."""
    return verify_offloaded_copy(offloader, t, expect)


def assert_mismatch(check: IndexCheck, words: str) -> None:
    assert check.outcome is Verification.MISMATCH and words in check.detail, check


def offload_ledger(endpoint: str, bucket: str, t: OffloadTarget, ml: str = ML, entries: int = 10,
                   size: int = 1000) -> None:
    """Write a ledger's data and index objects the way upstream does."""
    data, index = S3Offloader().object_names(t)[:2]
    put(endpoint, bucket, data, b"data-blocks", UPSTREAM_META)
    put(endpoint, bucket, index, build_index_v1(pulsar_ledger_metadata(ml, entries=entries, size=size)),
        UPSTREAM_META)


# ------------------------------------------------------------------ deletion


def test_delete_per_ledger_objects_and_second_delete_is_absent(s3_server, bucket, offloader) -> None:
    t = target(s3_server.endpoint, bucket)
    offload_ledger(s3_server.endpoint, bucket, t)
    other = target(s3_server.endpoint, bucket, ledger_id=43)
    offload_ledger(s3_server.endpoint, bucket, other)
    names = offloader.object_names(t)
    assert all(offloader.exists(t, n) for n in names)
    assert offloader.head(t, names[0]).user_metadata[FORMAT_VERSION_KEY] == "1"

    assert offloader.delete_all(t) == dict.fromkeys(names, ObjectDeleteOutcome.DELETED)
    assert keys(s3_server.endpoint, bucket) == set(offloader.object_names(other))
    # idempotent: a retried deletion finds nothing and succeeds
    assert offloader.delete_all(t) == dict.fromkeys(names, ObjectDeleteOutcome.ABSENT)


def test_delete_streaming_segments_and_partial_presence(s3_server, bucket, offloader) -> None:
    segs = (SegmentRef(1, 2), SegmentRef(-3, -4))
    t = target(s3_server.endpoint, bucket, msb=0, lsb=0, segments=segs)
    names = offloader.object_names(t)
    assert len(names) == 4
    for name in names[:3]:  # the last segment's index is already gone
        put(s3_server.endpoint, bucket, name)
    outcome = offloader.delete_all(t)
    assert outcome == {**dict.fromkeys(names[:3], ObjectDeleteOutcome.DELETED), names[3]: ObjectDeleteOutcome.ABSENT}
    assert keys(s3_server.endpoint, bucket) == set()


def test_legacy_s3_driver_with_older_endpoint_key(s3_server, bucket, offloader) -> None:
    t = target(s3_server.endpoint, bucket, driver="S3", endpoint_key="endpoint")
    offload_ledger(s3_server.endpoint, bucket, t)
    assert set(offloader.delete_all(t).values()) == {ObjectDeleteOutcome.DELETED}


def test_missing_bucket_is_a_target_error_not_absent(s3_server, offloader) -> None:
    t = target(s3_server.endpoint, "no-such-bucket-here")
    for call in (offloader.delete_all, lambda t: verify(offloader, t),
                 lambda t: offloader.head(t, offloader.object_names(t)[0])):
        with pytest.raises(OffloadTargetError, match="does not exist"):
            call(t)


# ------------------------------------------------------------------ allow-list


def test_targets_outside_the_allow_list_are_never_touched(s3_server, bucket) -> None:
    t = target(s3_server.endpoint, bucket)
    offload_ledger(s3_server.endpoint, bucket, t)
    before = keys(s3_server.endpoint, bucket)
    refusing = [
        S3Offloader(AllowList.of(buckets=["some-other-bucket"])),
        S3Offloader(AllowList.of(endpoints=["https://s3.us-east-1.amazonaws.com"])),
        S3Offloader(AllowList.of(drivers=["aliyun-oss"])),
    ]
    for off in refusing:
        for call in (lambda o=off: o.delete_all(t), lambda o=off: o.head(t, "x"),
                     lambda o=off: o.index_refs(t), lambda o=off: o.read_index(t, S3Offloader().index_refs(t)[0]),
                     lambda o=off: o.object_names(t)):
            with pytest.raises(OffloadNotAllowedError):
                call()
    assert keys(s3_server.endpoint, bucket) == before
    allowed = S3Offloader(AllowList.of(buckets=[bucket], endpoints=[s3_server.endpoint + "/"]))
    assert verify(allowed, t).outcome is Verification.VERIFIED


# ------------------------------------------------------------------ index verification


def test_index_of_this_ledger_is_verified(s3_server, bucket, offloader) -> None:
    t = target(s3_server.endpoint, bucket)
    offload_ledger(s3_server.endpoint, bucket, t, entries=10, size=1000)
    check = verify(offloader, t, IndexExpectation(entries=10, size=1000))
    assert check.outcome is Verification.VERIFIED
    assert "managed-ledger" in check.detail and "entries" in check.detail


def test_index_of_another_ledger_is_refused(s3_server, bucket, offloader) -> None:
    t = target(s3_server.endpoint, bucket)
    # same object name, but the index describes a ledger of another topic
    offload_ledger(s3_server.endpoint, bucket, t, ml="public/default/persistent/payments")
    assert_mismatch(verify(offloader, t), "payments")
    # ... or of the same topic with another size
    offload_ledger(s3_server.endpoint, bucket, t, entries=3, size=30)
    assert_mismatch(verify(offloader, t, IndexExpectation(entries=10)), "lastEntryId")
    assert set(offloader.object_names(t)) <= keys(s3_server.endpoint, bucket)  # nothing deleted


def test_index_that_is_not_an_offload_index_is_refused(s3_server, bucket, offloader) -> None:
    t = target(s3_server.endpoint, bucket)
    data, index = offloader.object_names(t)
    put(s3_server.endpoint, bucket, data)
    put(s3_server.endpoint, bucket, index, b"definitely not an index block")
    assert_mismatch(verify(offloader, t), "not a per-ledger offload index")
    put(s3_server.endpoint, bucket, index, build_index_v1(pulsar_ledger_metadata(ML, entries=1, size=1)),
        {FORMAT_VERSION_KEY: "2"})
    assert_mismatch(verify(offloader, t), "format version")


def test_unverifiable_and_absent_outcomes(s3_server, bucket, offloader) -> None:
    t = target(s3_server.endpoint, bucket)
    assert verify(offloader, t).outcome is Verification.ABSENT
    data, index = offloader.object_names(t)
    put(s3_server.endpoint, bucket, data)
    assert verify(offloader, t).outcome is Verification.UNVERIFIABLE  # data without index
    # an index that names no managed ledger (older brokers): valid, but nothing proves whose it is
    put(s3_server.endpoint, bucket, index,
        build_index_v1(encode_ledger_metadata_format(last_entry_id=4, length=9)))
    check = verify(offloader, t, IndexExpectation(managed_ledger_name=ML, entries=5, size=9))
    assert check.outcome is Verification.UNVERIFIABLE, "entries and size agreeing prove nothing about the topic"
    assert "names no managed ledger" in check.detail
    # ... unless upstream's ManagedLedgerName object metadata names it
    put(s3_server.endpoint, bucket, index, build_index_v1(encode_ledger_metadata_format(last_entry_id=4, length=9)),
        {**UPSTREAM_META, "managedledgername": ML})
    check = verify(offloader, t)
    assert (check.outcome, check.owner) == (Verification.VERIFIED, ML)
    put(s3_server.endpoint, bucket, index, build_index_v1(encode_ledger_metadata_format(last_entry_id=4, length=9)),
        {**UPSTREAM_META, "managedledgername": "other/ns/persistent/victim"})
    assert_mismatch(verify(offloader, t), "victim")


def test_streaming_segment_index_must_name_this_ledger_only(s3_server, bucket, offloader) -> None:
    seg = SegmentRef(11, 22)
    t = target(s3_server.endpoint, bucket, ledger_id=7, msb=0, lsb=0, segments=(seg,))
    put(s3_server.endpoint, bucket, seg.uuid)
    index = f"{seg.uuid}-index"
    put(s3_server.endpoint, bucket, index, build_index_v2({8: encode_ledger_info(8, 1, 1)}), UPSTREAM_META)
    assert_mismatch(verify(offloader, t), "does not hold ledger 7")
    put(s3_server.endpoint, bucket, index,
        build_index_v2({7: encode_ledger_info(7, 1, 1), 8: encode_ledger_info(8, 1, 1)}), UPSTREAM_META)
    assert_mismatch(verify(offloader, t), "also holds ledgers")
    put(s3_server.endpoint, bucket, index, build_index_v2({7: encode_ledger_info(7, 1, 1)}), UPSTREAM_META)
    # "holds ledger 7" says nothing about the topic: a forged topicName must not delete a victim's segment
    check = verify(offloader, t)
    assert check.outcome is Verification.UNVERIFIABLE and "names its topic" in check.detail
    put(s3_server.endpoint, bucket, seg.uuid, b"x", {**UPSTREAM_META, "managedledgername": "victim/ns/persistent/v"})
    assert_mismatch(verify(offloader, t), "victim")
    put(s3_server.endpoint, bucket, seg.uuid, b"x", {**UPSTREAM_META, "managedledgername": ML})
    check = verify(offloader, t)
    assert (check.outcome, check.owner) == (Verification.VERIFIED, ML)


# ------------------------------------------------------------------ transient failures


def test_stopped_server_is_transient(s3_server, bucket, offloader) -> None:
    t = target(s3_server.endpoint, bucket)
    try:
        s3_server.stop()
        started = time.monotonic()
        with pytest.raises(OffloadTransientError):
            offloader.delete_all(t)
        with pytest.raises(OffloadTransientError):
            verify(offloader, t)
        assert time.monotonic() - started < 10, "connection refused must fail fast"
    finally:
        s3_server.start()


@pytest.fixture
def proxy(s3_server: MotoS3Server) -> Iterator[FaultProxy]:
    with FaultProxy(s3_server.endpoint) as p:
        yield p


@pytest.mark.parametrize("fault", [
    Fault.status(500), Fault.status(503, "SlowDown"), Fault.status(503), Fault.status(429, "TooManyRequests"),
    Fault.delay(3.0), Fault.reset(),
], ids=["500", "503-SlowDown", "503", "429", "timeout", "reset"])
def test_injected_faults_are_transient(s3_server, bucket, proxy, fault: Fault) -> None:
    offloader = S3Offloader(connect_timeout=1, read_timeout=0.5)
    t = target(proxy.endpoint, bucket)
    offload_ledger(s3_server.endpoint, bucket, t)
    proxy.set_fault(fault)
    seen = len(proxy.requests)
    started = time.monotonic()
    with pytest.raises(OffloadTransientError):
        offloader.delete_all(t)
    tried = Counter(proxy.requests[seen:])
    assert tried and max(tried.values()) == 1, f"botocore retried on its own: {tried}"
    if fault.kind == "delay":  # gave up on its own short read timeout, not on the reply the fault delays
        assert time.monotonic() - started < fault.seconds, "the client waited for the delayed reply"
    assert set(offloader.object_names(t)) <= keys(s3_server.endpoint, bucket)
    # the fault clears; the caller's retry succeeds (no botocore-internal retry storm before that)
    proxy.clear()
    assert set(S3Offloader().delete_all(t).values()) == {ObjectDeleteOutcome.DELETED}


def test_botocore_does_not_retry_by_default(s3_server, bucket, proxy) -> None:
    t = target(proxy.endpoint, bucket)
    proxy.set_fault(Fault.status(503, "SlowDown"))
    with pytest.raises(OffloadTransientError, match="SlowDown|503"):
        S3Offloader().head(t, "some-key")
    assert len(proxy.requests) == 1
    proxy.requests.clear()
    with pytest.raises(OffloadTransientError):
        S3Offloader(max_attempts=2).head(t, "some-key")
    assert len(proxy.requests) == 2


@pytest.mark.parametrize("fault", [
    Fault.status(503, "SlowDown", {"DELETE", "POST"}), Fault.status(500, None, {"DELETE", "POST"}),
    Fault.delay(3.0, {"DELETE", "POST"}), Fault.reset({"DELETE", "POST"}),
], ids=["SlowDown", "500", "timeout", "reset"])
def test_faults_on_the_delete_request_itself_are_transient(s3_server, bucket, proxy, fault: Fault) -> None:
    t = target(proxy.endpoint, bucket)
    offload_ledger(s3_server.endpoint, bucket, t)
    proxy.set_fault(fault)
    with pytest.raises(OffloadTransientError) as info:
        S3Offloader(read_timeout=0.5).delete_all(t)
    assert "DELETE" in str(info.value)
    if fault.code == "SlowDown" and fault.kind == "status":
        assert "SlowDown" in str(info.value)  # the XML error code, not just the status


def test_throttled_index_read_is_transient(s3_server, bucket, proxy) -> None:
    t = target(proxy.endpoint, bucket)
    offload_ledger(s3_server.endpoint, bucket, t)
    proxy.set_fault(Fault.status(503, "SlowDown", {"GET"}), times=1)
    with pytest.raises(OffloadTransientError, match="SlowDown"):
        verify(S3Offloader(), t)
    assert verify(S3Offloader(), t).outcome is Verification.VERIFIED  # fault used up


def _delete_result(*errors: tuple[str, str]) -> str:
    items = "".join(f"<Error><Key>{k}</Key><Code>{c}</Code><Message>m</Message></Error>" for k, c in errors)
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">{items}</DeleteResult>')


@pytest.mark.parametrize(("code", "expected"), [
    ("InternalError", OffloadTransientError), ("SlowDown", OffloadTransientError),
    ("AccessDenied", OffloadTargetError), ("NoSuchKey", None),
])
def test_batch_delete_per_key_errors(s3_server, bucket, proxy, code: str, expected) -> None:
    t = target(proxy.endpoint, bucket, msb=0, lsb=0, segments=(SegmentRef(1, 1), SegmentRef(2, 2)))
    names = S3Offloader().object_names(t)
    for name in names:
        put(s3_server.endpoint, bucket, name)
    seg_data = names[0]
    # S3 answers 200 to DeleteObjects and lists the keys it could not delete
    proxy.set_fault(Fault.body(200, _delete_result((seg_data, code)), {"POST"}), times=1)
    if expected is None:
        outcome = S3Offloader().delete_all(t)
        assert outcome[seg_data] is ObjectDeleteOutcome.ABSENT
    else:
        with pytest.raises(expected, match=code):
            S3Offloader().delete_all(t)
        # the index objects were not touched: data goes first, and the batch failed
        assert {names[1], names[3]} <= keys(s3_server.endpoint, bucket)
