"""A realistic little cluster, then both phases over it: what ``ledger-deletion demo`` shows.

The state is what an operator meets in production: topics whose cursors sit
at different positions, a schema, ledgers offloaded to tiered storage, orphan
ledgers of a deleted topic (some too young to touch), a forged request, a
ledger that never closed, a garbled message, and a topic served by a stock
broker that deletes in one phase and whose storage delete fails once (the
leak watcher catches that leak).  Everything runs through the
same code as the daemon; only the retry delay is shortened so the demo ends
in seconds rather than hours.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from deletion_service.broker.interface import BrokerError
from deletion_service.cluster_writer import ClusterWriter, pulsar_custom_metadata, schema_custom_metadata
from deletion_service.delete_phase.consumer.worker import Settled
from deletion_service.mark_phase.trim import trim
from deletion_service.protocol.request import PendingDeleteLedgerInfo, Reason
from deletion_service.service import LedgerDeletionService
from deletion_service.testing.offload_objects import build_mapfile_data, pulsar_ledger_metadata
from metastore.formats import LedgerInfo, OffloadContext, Position, managed_ledger_name
from offloaders.filesystem import mapfile_dir_name
from offloaders.interface import java_uuid

DAY_MS = 86_400_000


@dataclass
class DemoPlan:
    """What was built and sent, so the summary can say what should have happened."""

    namespace: str
    topics: list[str] = field(default_factory=list)
    requests: list[PendingDeleteLedgerInfo] = field(default_factory=list)
    garbage: int = 0
    trimmed: int = 0  # ledgers trim removed from ledger lists
    sent_by_trim: int = 0  # their requests (an offloaded ledger still in BookKeeper has two)
    waiting: int = 0  # young orphans: they wait out minLedgerAgeSeconds, so they stay in RETRY
    stock_topic: str = ""  # served by a broker that deletes in one phase
    stock_ledgers: list[int] = field(default_factory=list)
    leaked: list[int] = field(default_factory=list)  # its storage delete failed: the leak watcher's to catch

    @property
    def expected_endings(self) -> int:
        return len(self.requests) + self.sent_by_trim + self.garbage - self.waiting


def build(service: LedgerDeletionService, writer: ClusterWriter, offload_dir: Path, run_id: str,
          topics: int = 6, ledgers_per_topic: int = 30) -> DemoPlan:
    ns = f"demo/run-{run_id}"
    plan = DemoPlan(ns)
    now = int(time.time() * 1000)
    ids = itertools.count(int(run_id) * 10_000 % (2**40) + 1)
    writer.ensure_layout()
    for t in range(topics):
        topic = f"persistent://{ns}/orders-{t}"
        plan.topics.append(topic)
        ledgers = []
        for i in range(ledgers_per_topic):
            lid = next(ids)
            ctx = None
            if t % 2 == 0 and i < 5:  # the oldest ledgers of every other topic went to tiered storage
                ctx = _offload(offload_dir, topic, lid, msb=lid, lsb=t, bookkeeper_deleted=i < 2, now=now)
            if ctx is None or not ctx.bookkeeper_deleted:
                writer.bk_ledger(lid, pulsar_custom_metadata(topic), ctime_ms=now - 3 * DAY_MS,
                                 state="OPEN" if i == ledgers_per_topic - 1 else "CLOSED")
            ledgers.append(LedgerInfo(lid, entries=100, size=100 * 1024, timestamp=now - 3 * DAY_MS,
                                      offload_context=ctx))
        writer.managed_ledger(topic, ledgers)
        # Cursors at various positions: the slowest decides what trim may remove.
        slow = ledgers[ledgers_per_topic // 2 + t].ledger_id
        writer.cursor(topic, "billing", Position(slow, 99))
        writer.cursor(topic, "analytics", Position(ledgers[-2].ledger_id, 10))
        schema_ledgers = [next(ids), next(ids)]
        for lid in schema_ledgers:
            writer.bk_ledger(lid, schema_custom_metadata(topic), ctime_ms=now - 3 * DAY_MS)
        writer.schema(topic, schema_ledgers)
        # A stale manual request for a ledger that is still listed: must come back "still in use".
        plan.requests.append(_req(topic, ledgers[-3].ledger_id, "manual", now))

    plan.stock_topic = f"persistent://{ns}/stock-broker"
    plan.stock_ledgers = [next(ids) for _ in range(6)]
    for lid in plan.stock_ledgers:
        writer.bk_ledger(lid, pulsar_custom_metadata(plan.stock_topic), ctime_ms=now - 3 * DAY_MS)
    writer.managed_ledger(plan.stock_topic, [LedgerInfo(lid, entries=100, size=100 * 1024,
                                                        timestamp=now - 3 * DAY_MS) for lid in plan.stock_ledgers])
    gone = f"persistent://{ns}/deleted-topic"
    for _ in range(20):  # orphans of a topic deleted long ago
        lid = next(ids)
        writer.bk_ledger(lid, pulsar_custom_metadata(gone), ctime_ms=now - 5 * DAY_MS)
        plan.requests.append(_req(gone, lid, "orphan", now))
    live = plan.topics[0]
    for _ in range(3):  # created a minute ago, newer than anything listed: a broker may be about to record them
        lid = next(ids)
        writer.bk_ledger(lid, pulsar_custom_metadata(live), ctime_ms=now - 60_000)
        plan.requests.append(_req(live, lid, "orphan", now))
        plan.waiting += 1
    victim = plan.topics[1]
    for _ in range(4):  # forged: names a topic the ledger does not belong to
        lid = next(ids)
        writer.bk_ledger(lid, pulsar_custom_metadata(victim), ctime_ms=now - 5 * DAY_MS)
        plan.requests.append(_req(gone, lid, "manual", now))
    lid = next(ids)  # a ledger that never closed: retried, then parked in the DLQ
    writer.bk_ledger(lid, pulsar_custom_metadata(gone), state="OPEN", ctime_ms=now - 5 * DAY_MS)
    plan.requests.append(_req(gone, lid, "orphan", now))
    plan.requests += [_req(gone, next(ids), "manual", now) for _ in range(3)]  # already gone
    plan.garbage = 1
    return plan


def one_phase_delete(writer: ClusterWriter, plan: DemoPlan) -> None:
    """What a stock broker does when it trims ``plan.stock_topic``: the three oldest ledgers leave its
    list, then it deletes each from BookKeeper, and here the last of those deletes fails (a bookie
    hiccup): that ledger leaks, with nothing left that names it."""
    removed, kept = plan.stock_ledgers[:3], plan.stock_ledgers[3:]
    writer.managed_ledger(plan.stock_topic, [LedgerInfo(lid, entries=100, size=100 * 1024) for lid in kept])
    for lid in removed[:-1]:
        writer.delete_bk_ledger(lid)
    plan.leaked = removed[-1:]


def _req(topic: str, ledger_id: int, reason: str, now: int) -> PendingDeleteLedgerInfo:
    return PendingDeleteLedgerInfo.model_validate({
        "topicName": topic, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER", "ledgerId": ledger_id,
        "markedAt": now, "reason": reason})


def _offload(base: Path, topic: str, ledger_id: int, msb: int, lsb: int, bookkeeper_deleted: bool,
             now: int) -> OffloadContext:
    """Write the ledger the way the filesystem offloader does (a MapFile directory)."""
    ml = managed_ledger_name(topic)
    d = base / ml / mapfile_dir_name(ledger_id, java_uuid(msb, lsb))
    d.mkdir(parents=True, exist_ok=True)
    meta = pulsar_ledger_metadata(ml, entries=100, size=100 * 1024, ctime_ms=now - 3 * DAY_MS)
    (d / "data").write_bytes(build_mapfile_data(meta, [b"entry"] * 3))
    (d / "index").write_bytes(b"")
    return OffloadContext(uid_msb=msb, uid_lsb=lsb, complete=True, bookkeeper_deleted=bookkeeper_deleted,
                          timestamp=now, driver_name="filesystem", driver_metadata={})


def mark(service: LedgerDeletionService, plan: DemoPlan, on_trim: Callable[[str, int], None] | None = None) -> None:
    """Phase one: trim every topic, then send the orphan, manual and garbled requests."""
    def send(requests: Sequence[PendingDeleteLedgerInfo]) -> list[str | BrokerError]:
        answers = service.send_pending_deletes(requests)
        # only receipted requests reach the daemon, so only they are awaited
        plan.sent_by_trim += sum(isinstance(answer, str) for answer in answers)
        return answers

    for topic in plan.topics:
        result = trim(service.store, topic, send, offline=True,
                      write_within_s=service.policy.in_use_grace_s)
        plan.trimmed += len(result.removed)
        if on_trim:
            on_trim(topic, len(result.removed))
    for request in plan.requests:
        service.send_pending_delete(request)
    service.publisher.send_raw(service.topics.partition_topics[0], b"{this is not a request")


def leaks_caught(settled: list[Settled], plan: DemoPlan) -> int:
    """The stock broker's leaks the leak watcher requested and the delete phase deleted."""
    return len({s.request.ledger_id for s in settled if s.request is not None and s.outcome.value == "deleted"
                and s.request.reason == Reason.LEAKED and s.request.ledger_id in plan.leaked})


def tally(settled: list[Settled], namespace: str) -> Counter:
    """Endings of this run's requests (other runs' leftovers in the same topics are not counted)."""
    out: Counter = Counter()
    for s in settled:
        if s.outcome.value == "reconsumed":
            continue
        if s.request is None or s.request.topic_name.startswith(f"persistent://{namespace}/"):
            key = s.outcome.value
            if key == "deleted" and s.request is not None:
                key = "deleted offloaded copy" if s.request.ledger_type.value == "OFFLOAD_LEDGER" else "deleted ledger"
            out[key] += 1
    return out
