"""No code path leaves a message neither acked nor reconsumed — every outcome enumerated.

The broker here is an in-process fake on purpose: it injects faults a real
broker does not produce on demand (a publish or an ack refused exactly once,
at exactly that step).  Gathering and execution are scripted per message so
that every verdict meets every delete result, plus a gatherer that raises.
The real-broker end-to-end paths are in ``test_every_row_on_real_servers.py``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from deletion_service.broker.interface import BrokerError, Consumer, Outgoing, Received
from deletion_service.broker.publisher import CopyPublisher
from deletion_service.delete_phase.consumer.copies import RECONSUMETIMES
from deletion_service.delete_phase.consumer.worker import DeletePhaseWorker, Limits
from deletion_service.delete_phase.pipeline import DeleteExecutor, DeletePipeline, Gatherer
from deletion_service.delete_phase.rules.decision import Action, Policy, Verdict
from deletion_service.delete_phase.rules.facts import BookKeeperFact, DeleteResult, Facts, OffloadFact
from deletion_service.metrics import DeletionMetrics
from deletion_service.protocol.fate import DeleteStatus
from deletion_service.protocol.request import PendingDeleteLedgerInfo
from metastore.formats import LedgerMetadata

ML = {"application": b"pulsar", "component": b"managed-ledger", "pulsar/managed-ledger": b"t/ns/persistent/x"}


def meta(state: str = "CLOSED", custom: dict | None = None) -> LedgerMetadata:
    return LedgerMetadata(2, 3, 2, state=state, ctime=0, custom_metadata=ML if custom is None else custom)


# What gathering can report, one per row of the table.
FACTS = {
    "in-use": lambda: Facts(10**13, references=("listed",)),
    "transient": lambda: Facts(10**13, transient="zk down"),
    "unverifiable": lambda: Facts(10**13, unverifiable="bad cursor node"),
    "absent": lambda: Facts(10**13, bookkeeper=BookKeeperFact("/l")),
    "unreadable": lambda: Facts(10**13, bookkeeper=BookKeeperFact("/l", unreadable="garbage", version=0)),
    "mismatch": lambda: Facts(10**13, bookkeeper=BookKeeperFact("/l", meta(custom={}), 0, 0)),
    "open": lambda: Facts(10**13, bookkeeper=BookKeeperFact("/l", meta("OPEN"), 0, 0)),
    "verified": lambda: Facts(10**13, bookkeeper=BookKeeperFact("/l", meta(), 3, 0)),
}
OFFLOAD_FACTS = {
    "not-allowed": lambda: Facts(10**13, offload=OffloadFact(not_allowed="bucket")),
    "target-error": lambda: Facts(10**13, offload=OffloadFact(target_error="no bucket")),
    "verified": lambda: Facts(
        10**13, offload=OffloadFact(present=True, verified="ok", oldest_object_ms=0)
    ),
}
RESULTS = [DeleteResult(DeleteStatus.DELETED), DeleteResult(DeleteStatus.ABSENT),
           DeleteResult(DeleteStatus.BAD_VERSION), DeleteResult(DeleteStatus.TRANSIENT, "s3 503"),
           DeleteResult(DeleteStatus.FAILED, "access denied")]


@dataclass
class FakeConsumer(Consumer):
    queue: list[Received]
    acked: list[str] = field(default_factory=list)
    fail_acks: set[str] = field(default_factory=set)  # ids whose first ack is refused

    def receive(self, timeout_s: float) -> Received | None:
        return self.queue.pop(0) if self.queue else None

    def ack(self, message: Received) -> None:
        if message.message_id in self.fail_acks:
            self.fail_acks.discard(message.message_id)
            raise BrokerError("ack refused")
        assert message.message_id not in self.acked, "acked twice"
        self.acked.append(message.message_id)

    def close(self) -> None:
        pass


@dataclass
class FakePublisher(CopyPublisher):
    """Refuses the next ``fail_sends`` sends.  Declares :class:`CopyPublisher`: the type checker
    holds it to the contract the worker publishes through, so the two cannot drift apart."""

    sent: list[tuple[str, str]] = field(default_factory=list)  # (topic kind, origin id)
    fail_sends: int = 0

    def _send(self, kind: str, props: dict[str, str]) -> str:
        if self.fail_sends:
            self.fail_sends -= 1
            raise BrokerError("publish refused")
        self.sent.append((kind, props["ORIGIN_MESSAGE_ID"]))
        return f"{kind}-{len(self.sent)}"

    def send_retry(self, data: bytes, properties: dict[str, str], delay_s: float,
                   source_topic: str | None = None) -> str:
        return self._send("retry", properties)

    def send_dlq(self, data: bytes, properties: dict[str, str], source_topic: str | None = None) -> str:
        return self._send("dlq", properties)

    def _send_each(self, kind: str, copies: Sequence[Outgoing]) -> list[str | BrokerError]:
        out: list[str | BrokerError] = []
        for copy in copies:
            try:
                out.append(self._send(kind, copy.properties))
            except BrokerError as e:
                out.append(e)
        return out

    def send_retries(self, copies: Sequence[Outgoing]) -> list[str | BrokerError]:
        return self._send_each("retry", copies)

    def send_dead_letters(self, copies: Sequence[Outgoing]) -> list[str | BrokerError]:
        return self._send_each("dlq", copies)


class ScriptedGatherer(Gatherer):
    def __init__(self, script: dict[int, Facts | Exception]) -> None:
        self.script = script

    def gather(self, requests: Sequence[PendingDeleteLedgerInfo], attempts: Sequence[int],
               grace_since: Sequence[int | None] | None = None) -> list[Facts]:
        out = []
        for r, a in zip(requests, attempts, strict=True):
            f = self.script[r.ledger_id]
            if isinstance(f, Exception):
                raise f
            out.append(Facts(**{**f.__dict__, "attempts": a}))
        return out


class ScriptedExecutor(DeleteExecutor):
    def __init__(self, results: dict[int, DeleteResult]) -> None:
        self.results = results
        self.ids: list[int] = []
        self.dry_run = False

    def run(self, actions: Sequence[Action], facts: Sequence[Facts]) -> list[DeleteResult | None]:
        return [
            self.results[i] if a.verdict in (Verdict.DELETE_BOOKKEEPER, Verdict.DELETE_OFFLOAD) else None
            for i, a in zip(self.ids, actions, strict=True)
        ]


def message(ledger_id: int, ledger_type: str = "LEDGER", attempts: int = 0, raw: bytes | None = None) -> Received:
    body = {
        "topicName": "persistent://t/ns/x",
        "ledgerComponent": "MANAGED_LEDGER",
        "ledgerType": ledger_type,
        "ledgerId": ledger_id,
        "markedAt": 1,
        "reason": "trim",
    }
    if ledger_type == "OFFLOAD_LEDGER":
        body["offloadContext"] = {"uidMsb": 1, "uidLsb": 1, "driverName": "aws-s3"}
    return Received(
        raw if raw is not None else json.dumps(body).encode(),
        {RECONSUMETIMES: str(attempts)},
        "persistent://pulsar/system/__ledger_deletion-partition-0",
        f"m{ledger_id}",
        0,
    )


CASES = [("LEDGER", f, r, a) for f, r, a in itertools.product(FACTS, RESULTS, [0, 5])] + [
    ("OFFLOAD_LEDGER", f, r, a) for f, r, a in itertools.product(OFFLOAD_FACTS, RESULTS, [0, 5])
]


@pytest.mark.parametrize("broker_fault", ["none", "publish", "ack"])
def test_every_message_ends_acked_after_its_publish(broker_fault: str) -> None:
    script: dict[int, Facts | Exception] = {}
    results: dict[int, DeleteResult] = {}
    msgs = []
    for i, (ledger_type, fact, result, attempts) in enumerate(CASES):
        script[i] = (FACTS if ledger_type == "LEDGER" else OFFLOAD_FACTS)[fact]()
        results[i] = result
        msgs.append(message(i, ledger_type, attempts))
    msgs.append(message(999, raw=b"\x00garbage"))
    consumer = FakeConsumer(list(msgs), fail_acks={m.message_id for m in msgs} if broker_fault == "ack" else set())
    publisher = FakePublisher(fail_sends=3 if broker_fault == "publish" else 0)
    executor = ScriptedExecutor(results)
    executor.ids = list(range(len(CASES)))
    worker = DeletePhaseWorker(
        consumer,
        FakeConsumer([]),
        publisher,
        DeletePipeline(ScriptedGatherer(script), executor, metrics := DeletionMetrics()),
        Policy(reconsume_later_s=0, max_retries=5),
        metrics,
        Limits(batch_size=len(msgs), dispose_backoff_s=0),
        clock=lambda: 10**10,
    )
    worker.run_once(0.01)
    for _ in range(3):  # the broker recovers; undisposed messages are retried
        worker.run_once(0.01)
    assert worker.idle
    # Every message acked exactly once (FakeConsumer refuses double acks) ...
    assert sorted(consumer.acked) == sorted(m.message_id for m in msgs)
    # ... and each reconsume or dead letter was published before its ack.
    published = {origin for _, origin in publisher.sent}
    outcomes = worker.metrics.registry.get_sample_value
    reconsumed = outcomes("pulsar_ledger_deletion_acked_total", {"outcome": "reconsumed"}) or 0
    dlq = outcomes("pulsar_ledger_deletion_acked_total", {"outcome": "dlq"}) or 0
    assert len(publisher.sent) == reconsumed + dlq
    assert len(published) == len(publisher.sent)  # no message published twice
    total = sum(
        outcomes("pulsar_ledger_deletion_acked_total", {"outcome": o}) or 0
        for o in ["deleted", "absent", "still_in_use", "metadata_mismatch", "reconsumed", "dlq"]
    )
    assert total == len(msgs)


def test_a_crashing_gatherer_reconsumes_the_batch() -> None:
    msgs = [message(1), message(2)]
    consumer, publisher = FakeConsumer(list(msgs)), FakePublisher()
    worker = DeletePhaseWorker(
        consumer,
        FakeConsumer([]),
        publisher,
        DeletePipeline(ScriptedGatherer({1: RuntimeError("bug"), 2: RuntimeError("bug")}),
                       ScriptedExecutor({}), metrics := DeletionMetrics()),
        Policy(max_retries=5),
        metrics,
        clock=lambda: 10**10,
    )
    worker.run_once(0.01)
    assert sorted(consumer.acked) == ["m1", "m2"]
    assert [k for k, _ in publisher.sent] == ["retry", "retry"]


class _CrashingPipeline(DeletePipeline):
    """A pipeline failing past its own per-request guards (a bug): what the worker must survive."""

    def run(self, requests: Sequence[PendingDeleteLedgerInfo], attempts: Sequence[int], policy: Policy,
            grace_since: Sequence[int | None] | None = None) -> list[Action]:
        raise RuntimeError("a bug past every guard")


def test_a_pipeline_failing_outright_reconsumes_the_batch_not_strands_it() -> None:
    """An error escaping the pipeline reconsumes its batch: it is not left in hand, unacked."""
    msgs = [message(1), message(2)]
    consumer, publisher = FakeConsumer(list(msgs)), FakePublisher()
    worker = DeletePhaseWorker(
        consumer, FakeConsumer([]), publisher,
        _CrashingPipeline(ScriptedGatherer({}), ScriptedExecutor({}), metrics := DeletionMetrics()),
        Policy(max_retries=5), metrics, clock=lambda: 10**10,
    )
    worker.run_once(0.01)
    assert sorted(consumer.acked) == ["m1", "m2"]
    assert [k for k, _ in publisher.sent] == ["retry", "retry"]
