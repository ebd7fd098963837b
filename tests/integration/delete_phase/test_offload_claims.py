"""Claims on offloaded copies (``deletion_service/delete_phase/storage/offload_claims.py``): of every daemon and thread
holding a request for one copy, one deletes it (as in ``test_offloaded_copy_deleted_once.py``).

Real stores: ZooKeeper (a chroot per test) and the embedded SQLite store for the claims themselves, real
moto_server for the objects behind a loopback proxy that forwards everything but holds each delete
(``SlowDeletes`` of ``tests/support/replica_tools.py``, or ``GatedDeletes`` here: held until the test opens
the gate), so "a delete is under way" lasts long enough to look at: a fault moto cannot produce.
Two daemons are two :class:`OffloadClaims` (two owners) on two connections to one store.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import boto3
import pytest

from deletion_service.delete_phase.rules.decision import Action as DecidedAction
from deletion_service.delete_phase.rules.decision import Kind, Policy, Verdict, settle_delete
from deletion_service.delete_phase.rules.facts import DeleteResult, Facts, OffloadFact
from deletion_service.delete_phase.storage.execute import Executor
from deletion_service.delete_phase.storage.offload_claims import (
    CLAIMS_ROOT,
    MAX_CLOCK_SKEW_S,
    Busy,
    Claim,
    OffloadClaims,
    claim_name,
)
from deletion_service.protocol.fate import DeleteStatus
from metastore import open_store
from metastore.interface import ABSENT, MetadataStore
from offloaders.interface import OffloadTarget
from offloaders.registry import OffloaderSettings
from tests.support.deletion_world import S3Bucket
from tests.support.fault_proxy import FaultProxy
from tests.support.harness import MotoS3Server
from tests.support.replica_tools import SlowDeletes

TTL_S = 60.0


@pytest.fixture(params=["zookeeper", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path) -> str:  # noqa: ANN001 - pytest's tmp_path
    if request.param == "zookeeper":
        return str(request.getfixturevalue("zk_url"))
    return f"sqlite:///{tmp_path / 'metadata.db'}"


@pytest.fixture
def two_daemons(store_url: str) -> Iterator[tuple[MetadataStore, MetadataStore]]:
    """Two connections to one store: what two replicas hold."""
    a, b = open_store(store_url), open_store(store_url)
    yield a, b
    a.close()
    b.close()


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def target(ledger_id: int = 7, msb: int = 0x1234, lsb: int = 0x5678, bucket: str = "b",
           endpoint: str = "http://127.0.0.1:1") -> OffloadTarget:
    return OffloadTarget("aws-s3", {"bucket": bucket, "serviceEndpoint": endpoint}, msb, lsb, ledger_id)


def claim_node(store: MetadataStore, t: OffloadTarget) -> dict | None:
    node = store.get(f"{CLAIMS_ROOT}/{claim_name(t)}")
    return None if node is None else json.loads(node.data)


def test_a_second_daemon_defers_while_the_first_holds_the_claim_and_takes_it_once_released(
        two_daemons: tuple[MetadataStore, MetadataStore]) -> None:
    store_a, store_b = two_daemons
    a, b = OffloadClaims(store_a, TTL_S, owner="replica-a"), OffloadClaims(store_b, TTL_S, owner="replica-b")
    # Another request for the same copy, spelt with another endpoint: the copy is its uuid and ledger.
    t, t_again = target(), target(endpoint="http://localhost:1")
    claim = a.take(t)
    assert isinstance(claim, Claim)
    node = claim_node(store_b, t)
    assert node is not None and node["owner"] == "replica-a" and node["expiresAt"] > time.time() * 1000
    assert b.take(t_again) is Busy.ELSEWHERE
    assert a.take(t_again) is Busy.HERE, "a second thread of the owner must not take it either"
    assert isinstance(b.take(target(ledger_id=8)), Claim), "another copy is not held"
    a.release(claim)
    assert claim_node(store_b, t) is None, "released: the node is removed"
    assert isinstance(b.take(t_again), Claim)


def test_an_expired_claim_is_taken_over_and_its_dead_owner_can_neither_renew_nor_release_it(
        two_daemons: tuple[MetadataStore, MetadataStore]) -> None:
    store_a, store_b = two_daemons
    clock = Clock()
    dead = OffloadClaims(store_a, TTL_S, clock=clock, owner="replica-a")
    t = target()
    stale = dead.take(t)
    assert isinstance(stale, Claim)
    heir = OffloadClaims(store_b, TTL_S, clock=clock, owner="replica-b")
    third = OffloadClaims(store_b, TTL_S, clock=clock, owner="replica-c")
    assert heir.take(t) is Busy.ELSEWHERE, "not expired yet"
    clock.now += TTL_S + MAX_CLOCK_SKEW_S - 1
    assert heir.take(t) is Busy.ELSEWHERE, "past its life, but not by more than two clocks may differ"
    clock.now += 2
    taken = heir.take(t)
    assert isinstance(taken, Claim)
    assert (claim_node(store_a, t) or {}).get("owner") == "replica-b"
    assert third.take(t) is Busy.ELSEWHERE, "taken over once: the heir's claim is a fresh one"
    assert not dead.renew(stale), "the owner that paused past its claim's life must not delete"
    dead.release(stale)
    assert (claim_node(store_a, t) or {}).get("owner") == "replica-b", "a stale owner's release removed the heir's"
    assert heir.renew(taken)
    heir.release(taken)
    assert claim_node(store_a, t) is None


def test_a_claim_this_process_created_without_hearing_back_is_its_own(store_url: str) -> None:
    """A create whose reply was lost leaves a node of ours that nothing in memory holds: taken again at once,
    not waited out (another process's unexpired one is, above)."""
    store = open_store(store_url)
    try:
        claims = OffloadClaims(store, TTL_S, owner="replica-a")
        t = target()
        store.put(f"{CLAIMS_ROOT}/{claim_name(t)}",
                  json.dumps({"owner": "replica-a", "expiresAt": int((time.time() + TTL_S) * 1000)}).encode(), ABSENT)
        assert isinstance(claims.take(t), Claim)
    finally:
        store.close()


def test_claims_left_by_dead_owners_are_swept_and_live_ones_stay(
        two_daemons: tuple[MetadataStore, MetadataStore]) -> None:
    """A daemon that died after its delete's record, before its release, leaves a claim nothing would
    take again (the objects are gone): expired ones are removed by whoever takes a claim next."""
    store_a, store_b = two_daemons
    clock = Clock()
    dead, live = target(ledger_id=1), target(ledger_id=2)
    dying = OffloadClaims(store_a, TTL_S, clock=clock, owner="replica-a")
    assert isinstance(dying.take(dead), Claim)
    clock.now += TTL_S + MAX_CLOCK_SKEW_S + 1
    holder = OffloadClaims(store_a, TTL_S, clock=clock, owner="replica-c")
    assert isinstance(holder.take(live), Claim)
    assert isinstance(OffloadClaims(store_b, TTL_S, clock=clock, owner="replica-b").take(target(ledger_id=3)), Claim)
    assert claim_node(store_b, dead) is None, "the dead owner's expired claim was left behind"
    assert (claim_node(store_b, live) or {}).get("owner") == "replica-c", "a live claim was swept"


def test_a_claimed_copy_defers_its_request_untried_and_transient() -> None:
    policy = Policy(reconsume_later_s=600, max_retries=3)
    action = settle_delete(DecidedAction(Verdict.DELETE_OFFLOAD, "verified"),
                           DeleteResult(DeleteStatus.CLAIMED, Busy.ELSEWHERE.value), attempts=3, policy=policy)
    assert action.verdict == Verdict.RECONSUME and action.kind == Kind.TRANSIENT
    assert not action.counts, "waiting for a sibling's delete is no try of this request's"
    assert action.reason == "another daemon is deleting this offloaded copy now"
    assert 0 < action.delay_s <= 30


# ---- the executor: the claim around a real delete


@pytest.fixture
def slow_bucket(s3_server: MotoS3Server) -> Iterator[tuple[SlowDeletes, S3Bucket]]:
    name = f"claims-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=s3_server.endpoint, region_name="us-east-1").create_bucket(Bucket=name)
    proxy = SlowDeletes(s3_server.endpoint, delay_s=1.0)
    proxy.start()
    yield proxy, S3Bucket(s3_server.endpoint, name)
    proxy.stop()


def offloaded(bucket: S3Bucket, proxy: FaultProxy, ledger_id: int) -> tuple[OffloadTarget, list[str]]:
    names = bucket.offload_ledger("persistent://t/ns/claims", ledger_id, 0x1234, 0x5678)
    meta = {"bucket": bucket.name, "region": "us-east-1", "serviceEndpoint": proxy.endpoint}
    return OffloadTarget("aws-s3", meta, 0x1234, 0x5678, ledger_id), names


def delete_facts(t: OffloadTarget) -> Facts:
    return Facts(int(time.time() * 1000), offload=OffloadFact(target=t, present=True, verified="index matches"))


DELETE = DecidedAction(Verdict.DELETE_OFFLOAD, "verified")


def test_duplicates_in_one_batch_delete_the_copy_once(zk_url: str, slow_bucket: tuple[SlowDeletes, S3Bucket]) -> None:
    """Three requests for one copy in one batch: without deduplication all three HEAD the objects present
    while the (slow) deletes are under way, and all three say ``deleted``."""
    proxy, bucket = slow_bucket
    t, names = offloaded(bucket, proxy, 41)
    store = open_store(zk_url)
    try:
        results = Executor(store, OffloaderSettings()).run([DELETE] * 3, [delete_facts(t)] * 3)
    finally:
        store.close()
    statuses = [r.status for r in results if r is not None]
    assert statuses.count(DeleteStatus.DELETED) == 1 and statuses.count(DeleteStatus.ABSENT) == 2, statuses
    assert not (bucket.keys() & set(names))


class GatedDeletes(FaultProxy):
    """Forwards every request; a delete (``DELETE``, or a batch ``POST ?delete``) waits for :attr:`gate`."""

    def __init__(self, upstream: str) -> None:
        self.gate, self.delete_arrived = threading.Event(), threading.Event()
        super().__init__(upstream)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        base = super()._handler_class()
        proxy = self

        class Gated(base):  # type: ignore[misc, valid-type]
            def _forward(self, body: bytes) -> None:
                if self.command in ("DELETE", "POST"):
                    proxy.delete_arrived.set()
                    proxy.gate.wait(30)
                base._forward(self, body)  # pyright: ignore[reportAttributeAccessIssue]

        return Gated


def test_the_claim_is_held_while_the_objects_are_deleted_and_removed_with_the_outcome(
        zk_url: str, s3_server: MotoS3Server) -> None:
    name = f"claims-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=s3_server.endpoint, region_name="us-east-1").create_bucket(Bucket=name)
    bucket, proxy = S3Bucket(s3_server.endpoint, name), GatedDeletes(s3_server.endpoint)
    proxy.start()
    t, names = offloaded(bucket, proxy, 42)
    store, sibling_store = open_store(zk_url), open_store(zk_url)
    sibling = Executor(sibling_store, OffloaderSettings(), claims=OffloadClaims(sibling_store, owner="replica-b"))
    try:
        results: list[DeleteResult | None] = []
        first = threading.Thread(target=lambda: results.extend(
            Executor(store, OffloaderSettings(), claims=OffloadClaims(store, owner="replica-a"))
            .run([DELETE], [delete_facts(t)])))
        first.start()
        assert proxy.delete_arrived.wait(20), "the first daemon's delete never reached the store"
        assert (claim_node(sibling_store, t) or {}).get("owner") == "replica-a"
        [deferred] = sibling.run([DELETE], [delete_facts(t)])
        proxy.gate.set()
        first.join(30)
        [done] = results
        assert done is not None and done.status == DeleteStatus.DELETED
        assert deferred is not None and deferred.status == DeleteStatus.CLAIMED, deferred
        assert claim_node(sibling_store, t) is None, "the claim outlived its delete's outcome"
        assert not (bucket.keys() & set(names))
        [again] = sibling.run([DELETE], [delete_facts(t)])  # the deferred request, back from RETRY
        assert again is not None and again.status == DeleteStatus.ABSENT
    finally:
        proxy.gate.set()
        proxy.stop()
        store.close()
        sibling_store.close()


def test_a_copy_whose_deleter_died_holding_the_claim_is_deleted_once_the_claim_expires(
        zk_url: str, slow_bucket: tuple[SlowDeletes, S3Bucket]) -> None:
    proxy, bucket = slow_bucket
    t, names = offloaded(bucket, proxy, 43)
    store = open_store(zk_url)
    try:
        store.put(f"{CLAIMS_ROOT}/{claim_name(t)}", json.dumps(
            {"owner": "replica-a (killed)", "expiresAt": int((time.time() - MAX_CLOCK_SKEW_S - 1) * 1000)}).encode(),
            ABSENT)
        [result] = Executor(store, OffloaderSettings(), claims=OffloadClaims(store, owner="replica-b")).run(
            [DELETE], [delete_facts(t)])
        assert result is not None and result.status == DeleteStatus.DELETED, result
        assert {o.key for o in result.objects} == set(names)
        assert claim_node(store, t) is None
    finally:
        store.close()
