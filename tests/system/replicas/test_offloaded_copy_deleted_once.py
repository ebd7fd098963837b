"""One offloaded copy is recorded ``deleted`` once, however many replicas hold requests for it.

A BookKeeper znode is removed at the verified version, so of two replicas holding duplicate
requests only one deletes it and the other records ``absent``.  S3 has no such guard: the S3
offloader HEADs each object (to tell "deleted" from "absent", since S3 reports a delete of a
missing key as done), then deletes the present ones.  Two replicas holding duplicates of one
request (a trim that re-ran, a redelivery after a replica died, ``scan-orphans --enqueue`` twice)
would both find the objects present, both delete them, and both record ``deleted`` with the objects
and their sizes: the audit trails would say the copy was deleted twice, and ``deleted_total`` would
count it twice.  (Within one daemon the batch path is alike: duplicates in one batch need
deduplicating for offloaded copies as for BookKeeper znodes.)

So duplicates in one batch delete the copy once (the twins settle ``absent``), and the delete runs
under a claim in the metadata store (``deletion_service/delete_phase/storage/offload_claims.py``): the replica
that does not hold it defers its request, untried, and records ``absent`` when it comes back (so a
duplicate's first record may be ``reconsumed``: the wait below counts only final ones).

Real processes: two ``run`` replicas, pulsar-lite (the session's), ZooKeeper (a chroot), moto_server
behind a loopback proxy that forwards everything but holds each DELETE 2 s (a slow endpoint).  Run
once with the replicas' clocks together, and once with the second replica's clock two minutes
ahead (libfaketime): a claim names its expiry on its owner's clock, and a replica ahead by more than
the claim's life took over a live claim, so both deleted and recorded the copy.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.deletion_world import S3Bucket
from tests.support.harness import MotoS3Server, PulsarLiteBroker, wait_until
from tests.support.replica_tools import SlowDeletes, bucket_behind_slow_deletes, settled
from tests.support.replicas_world import ReplicaWorld

DUPLICATES = 6


@pytest.fixture
def world(tmp_path: Path, zk_url: str, pulsar_broker: PulsarLiteBroker) -> Iterator[ReplicaWorld]:
    w = ReplicaWorld(tmp_path, zk_url, pulsar_broker.service_url, scope="cluster")
    yield w
    w.close()


@pytest.fixture
def slow_s3(s3_server: MotoS3Server) -> Iterator[tuple[SlowDeletes, S3Bucket]]:
    with bucket_behind_slow_deletes(s3_server, delay_s=2.0) as slow:
        yield slow


@pytest.mark.parametrize("ahead", [None, "+120s"])
def test_duplicate_requests_for_one_offloaded_copy_record_one_deletion(
        world: ReplicaWorld, slow_s3: tuple[SlowDeletes, S3Bucket], ahead: str | None) -> None:
    proxy, bucket = slow_s3
    replicas = world.add_replicas(2)
    if ahead is not None:  # libfaketime preloaded into the replica itself (no wrapper process to outlive)
        library = next(iter(sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))), None)
        if library is None:
            pytest.skip("libfaketime missing: scripts/test.sh installs Debian's faketime")
        replicas[1].env = {**replicas[1].env, "LD_PRELOAD": str(library), "FAKETIME": ahead}
    for replica in replicas:
        replica.start()
    for replica in world.replicas:
        replica.wait_ready()
    ledger, msb, lsb = 40_000, 0x1234, 0x5678
    names = bucket.offload_ledger(world.topic, ledger, msb, lsb)  # an orphan copy: no managed ledger lists it
    context = {**bucket.offload_context(msb, lsb), "driverMetadata": {
        "bucket": bucket.name, "region": "us-east-1", "serviceEndpoint": proxy.endpoint}}
    line = json.dumps({"topicName": world.topic, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "OFFLOAD_LEDGER",
                       "ledgerId": ledger, "offloadContext": context, "reason": "orphan"})
    lines = world.root / "duplicates.jsonl"
    lines.write_text((line + "\n") * DUPLICATES)
    out = subprocess.run([*world.argv(world.root / "enqueue-data"), "enqueue", "--from-file", str(lines)],
                         env=world.env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr

    # A duplicate deferred while the other replica deletes the copy leaves a "reconsumed" record first.
    wait_until(lambda: len([o for o in settled(world, ledger) if o != "reconsumed"]) >= DUPLICATES, 60,
               f"all {DUPLICATES} duplicates settled",
               interval=0.5)
    assert not (bucket.keys() & set(names)), "the orphan copy was not deleted"
    outcomes = settled(world, ledger)
    by_replica = {r.name: [a["outcome"] for a in r.audit() if a["request"].get("ledgerId") == ledger]
                  for r in world.replicas}
    assert outcomes.count("deleted") == 1, (
        f"one offloaded copy recorded as deleted {outcomes.count('deleted')} times, each with its objects and "
        f"sizes: {by_replica}")
