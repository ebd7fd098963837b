"""A randomized run of stock brokers that leak, daemon replicas that watch, and a killer.

The cluster is real: ZooKeeper, a pulsar-lite process, ``moto_server`` and ``ledger-deletion run``
replicas (:mod:`tests.support.replicas_world`).  A :class:`~tests.support.stock_broker.StockBroker`
rolls ledgers over, trims, offloads, switches cursor ledgers, adds schema versions, compacts,
merges delayed-delivery buckets, moves cursors and deletes topics, in a random order; a storage
delete it makes fails now and then, which leaks the copy.  Meanwhile the replica that watches is
SIGKILLed at random moments and at the watcher's failpoints, and started again.

The judge (:meth:`LeakScenario.judge`) reads storage, the replicas' audit trails and the broker's
own record: every leak deleted, no request for a copy the broker deleted itself, no live copy
requested or deleted, and no ``leaked`` request the delete phase had to refuse as still in use.
Shared by ``tests/system/leak_watcher/test_randomized_leaks.py`` (short) and
``scripts/leak_watcher_soak.py`` (long).
"""

from __future__ import annotations

import json
import random
import signal
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from deletion_service.failpoints import WATCHER_POINTS
from deletion_service.leak_watcher import persisted
from metastore.formats import ledger_path
from offloaders.interface import java_uuid
from tests.support.deletion_world import S3Bucket
from tests.support.replicas_world import Replica, ReplicaWorld
from tests.support.stock_broker import Copy, StockBroker

#: What a broker does, and how often (weights).
OPERATIONS = {"rollover": 6, "trim": 5, "offload": 2, "switch_cursor_ledger": 2, "new_schema_version": 1,
              "compact": 1, "merge_buckets": 1, "move_cursor": 3, "delete_topic": 1, "create_topic": 1}


def _status(replica: Replica) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{replica.port}/status", timeout=3) as r:
            return json.loads(r.read())["leakWatcher"]
    except OSError:
        return {}


@dataclass
class LeakScenario:
    world: ReplicaWorld
    bucket: S3Bucket
    seed: int
    replicas: int = 2
    topics: int = 6
    #: No copy leaves its references sooner: what no watcher saw is the scan's (docs/design/leak-watcher.md),
    #: and a hand-over leaves nobody watching for up to the ZooKeeper session timeout (10 s) and two passes.
    min_life_s: float = 15.0
    log: list[str] = field(default_factory=list)
    kills: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.broker = StockBroker(self.world.store, self.bucket, f"r{self.world.tag}/leaky",
                                  random.Random(self.seed + 1), min_life_s=self.min_life_s)
        self.created = 0

    def watching(self) -> Replica | None:
        for replica in self.world.replicas:
            if replica.running():
                said = _status(replica)
                if said.get("watching") and said.get("lastPass"):
                    return replica
        return None

    def start(self) -> None:
        self.started_at = time.monotonic()
        for _ in range(self.topics):
            self._create()
        for replica in self.world.add_replicas(self.replicas):
            replica.start()
        for replica in self.world.replicas:
            replica.wait_ready()
        self._wait_watched(60)

    def _wait_watched(self, timeout_s: float) -> Replica:
        deadline = time.monotonic() + timeout_s
        while (watcher := self.watching()) is None:
            assert time.monotonic() < deadline, f"no replica watches after {timeout_s} s"
            time.sleep(0.2)
        return watcher

    def _create(self) -> None:
        self.created += 1
        self.broker.create_topic(f"t{self.created}")

    def step(self) -> None:
        """One broker operation on a random topic."""
        names, weights = zip(*OPERATIONS.items(), strict=True)
        op = self.rng.choices(names, weights)[0]
        if op == "create_topic" or not self.broker.topics:
            self._create()
            return
        if op == "delete_topic" and len(self.broker.topics) <= 2:
            op = "rollover"
        topic = self.rng.choice(sorted(self.broker.topics))
        getattr(self.broker, op)(topic)

    def kill_the_watcher(self) -> None:
        """SIGKILL the watching replica (now, or armed at one of the watcher's failpoints) and start it again."""
        watcher = self.watching()
        if watcher is None:
            return
        how = self.rng.choice(["now", *sorted(WATCHER_POINTS)])
        if how == "now":
            watcher.stop(signal.SIGKILL)
            watcher.start()
        else:
            watcher.stop(signal.SIGKILL)
            watcher.start(failpoint=f"{how}=kill")  # if it watches again, it dies there
        self.kills[how] += 1
        self.log.append(f"{time.monotonic() - self.started_at:.1f}s killed {watcher.name} ({how})")

    def run(self, seconds: float, kill_every_s: tuple[float, float] = (6, 12)) -> None:
        deadline = time.monotonic() + seconds
        next_kill = time.monotonic() + self.rng.uniform(*kill_every_s)
        while time.monotonic() < deadline:
            self.step()
            if time.monotonic() >= next_kill:
                self.kill_the_watcher()
                next_kill = time.monotonic() + self.rng.uniform(*kill_every_s)
            self._restart_the_dead()
            time.sleep(self.rng.uniform(0.02, 0.2))

    def _restart_the_dead(self) -> None:
        for replica in self.world.replicas:
            if not replica.running():  # died at its failpoint: started again, unarmed
                self.kills[f"{replica.name} died"] += 1
                self.log.append(f"{time.monotonic() - self.started_at:.1f}s {replica.name} died, restarted")
                replica.start()

    # ---- the judge

    def stored(self, copy: Copy) -> bool:
        if copy[0] == "ledger":
            return self.world.store.get(ledger_path(self.world.writer.root, copy[1], self.world.writer.layout)) \
                is not None
        try:
            self.bucket.client.head_object(Bucket=self.bucket.name, Key=f"{copy[2]}-ledger-{copy[1]}")
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    def records(self) -> list[dict[str, Any]]:
        return [r for replica in self.world.replicas for r in replica.audit()]

    @staticmethod
    def copy_of(request: dict[str, Any]) -> Copy:
        if request.get("ledgerType") == "OFFLOAD_LEDGER":
            ctx = request.get("offloadContext") or {}
            return ("offloaded", request["ledgerId"], java_uuid(ctx.get("uidMsb", 0), ctx.get("uidLsb", 0)))
        return ("ledger", request["ledgerId"])

    def judge(self, timeout_s: float = 90) -> dict[str, Any]:
        """Wait (bounded) for every leak to be deleted, then count what went wrong."""
        deadline = time.monotonic() + timeout_s
        left = {c for c in self.broker.leaked if self.stored(c)}
        while left and time.monotonic() < deadline:
            self._restart_the_dead()  # a replica still armed may die at its failpoint meanwhile
            time.sleep(0.5)
            left = {c for c in left if self.stored(c)}
        records = self.records()
        by_copy: dict[Copy, list[dict[str, Any]]] = {}
        for r in records:
            by_copy.setdefault(self.copy_of(r["request"]), []).append(r)
        live = self.broker.live()
        kept = persisted.load(self.world.store).state
        kept_ids = kept.reading.referenced()[0] if kept is not None else set()
        waiting = {self.copy_of(r.wire()) for _, r in kept.waiting} if kept is not None else set()
        leaked_requests = [r for r in records if r["request"].get("reason") == "leaked"]
        return {
            "seed": self.seed,
            "leaksInjected": len(self.broker.leaked),
            "leaksMissed": sorted(left, key=str),
            "leakedRequestsSettled": len(leaked_requests),
            "leaksDeleted": len({self.copy_of(r["request"]) for r in leaked_requests if r["outcome"] == "deleted"}),
            "deletedByBroker": len(self.broker.deleted_by_broker),
            "requestedThoughDeletedByBroker": sorted(
                (c for c in self.broker.deleted_by_broker if c in by_copy), key=str),
            "liveCopies": len(live),
            "liveRequested": sorted((c for c in live if c in by_copy), key=str),
            "liveMissing": sorted((c for c in live if not self.stored(c)), key=str),
            "wrongRequestsRefusedInUse": sum(1 for r in leaked_requests if r["outcome"] == "still_in_use"),
            "outcomes": dict(Counter(r["outcome"] for r in leaked_requests)),
            "kills": dict(self.kills),
            "missedStillInKeptReading": sorted((c for c in left if c[1] in kept_ids), key=str),
            "missedWaitingInKeptState": sorted((c for c in left if c in waiting), key=str),
            "missedBornAndLeakedAt": {str(c): (round(self.broker.born.get(c, 0) - self.started_at, 1),
                                               round(self.broker.leaked_at.get(c, 0) - self.started_at, 1))
                                      for c in left},
            "log": self.log[-20:],
        }
