"""``LedgerDeletionService``: the service's public interface, wiring stores, broker and storage together.

    start()                       subscribe the delete phase, open producers
    send_pending_delete(request)  phase one: publish a request, wait for its receipt
    delete_ledger(payload)        synchronous verify-and-delete of a BookKeeper ledger
    delete_offloaded_ledger(p)    the same for an offloaded copy
    close()

The synchronous deletes (used by the admin API) run the very same
:class:`DeletePipeline` as the consumer; only the disposition differs (an HTTP
status instead of ack/reconsume/DLQ).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from deletion_service.audit.writer import AuditWriter
from deletion_service.broker.consumer_group import ConsumerGroup
from deletion_service.broker.interface import BrokerClient, BrokerError, Received
from deletion_service.broker.publisher import RequestPublisher
from deletion_service.config import DeletionConfig
from deletion_service.delete_phase.consumer.worker import DeletePhaseWorker, Hooks, Limits, Settled
from deletion_service.delete_phase.offload.lane import OffloadLane
from deletion_service.delete_phase.pipeline import DeletePipeline
from deletion_service.delete_phase.process.child import DeleteProcess, DeleteProcessSpec
from deletion_service.delete_phase.process.lane import DeleteProcessLane
from deletion_service.delete_phase.rules.decision import Action, Policy
from deletion_service.delete_phase.rules.hold_reason import HoldSeal
from deletion_service.delete_phase.rules.outward import outward
from deletion_service.delete_phase.storage.breaker import Breaker, Breakers
from deletion_service.delete_phase.storage.execute import Executor, RateLimiter
from deletion_service.delete_phase.storage.gather import FactGatherer
from deletion_service.dlq.marker import MarkerKey
from deletion_service.metrics import DeletionMetrics
from deletion_service.protocol.fate import SyncOutcome
from deletion_service.protocol.request import DeleteLedgerPayload, LedgerType, PendingDeleteLedgerInfo, Reason
from deletion_service.protocol.scope import cross_namespace, namespace_exists
from deletion_service.protocol.topics import DeletionTopics, namespace_of_topic, namespace_topics
from metastore.interface import MetadataStore, MetadataStoreError
from offloaders.registry import OffloaderSettings

_log = logging.getLogger(__name__)

def policy_from(config: DeletionConfig) -> Policy:
    return Policy(
        reconsume_later_s=config.two_phase_deletion_reconsume_later_in_seconds,
        max_retries=config.two_phase_deletion_max_retry_delete_count,
        min_ledger_age_s=config.min_ledger_age_seconds,
        in_use_grace_s=config.two_phase_deletion_in_use_grace_seconds,
    )


def batch_size(config: DeletionConfig) -> int:
    """At most one second of work under ``maxDeletionsPerSecond``: a stop finishes the batch in
    hand, and a paced batch of a thousand would hold a SIGTERM for minutes."""
    rate = config.max_deletions_per_second
    size = config.two_phase_deletion_batch_size
    return size if rate <= 0 else max(1, min(size, int(rate)))


@dataclass(frozen=True)
class SyncResult:
    """The end of a synchronous delete."""

    outcome: SyncOutcome
    reason: str
    retry_after_s: float | None = None


class LedgerDeletionService:
    def __init__(
        self,
        config: DeletionConfig,
        store: MetadataStore,
        broker: BrokerClient,
        bookkeeper_store: MetadataStore | None = None,
        offload: OffloaderSettings | None = None,
        metrics: DeletionMetrics | None = None,
        dry_run: bool = False,
        audit: AuditWriter | None = None,
        delete_process: DeleteProcessSpec | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.bk_store = bookkeeper_store or store
        self.broker = broker
        self.metrics = metrics or DeletionMetrics()
        self.topics = DeletionTopics.from_config(config)
        self.offload = offload or OffloaderSettings.from_config(config.camel())
        self.policy = policy_from(config)
        self.namespace_scope = config.ledger_deletion_topic_scope == "namespace"
        # Asked afresh each time: a daemon lives longer than a namespace's existence (a cache would keep
        # routing to a namespace deleted since, or to the cluster's topics for one created since).
        self.publisher = RequestPublisher(broker, self.topics, namespace_scope=self.namespace_scope,
                                          namespace_known=functools.partial(namespace_exists, store))
        #: every set of deletion topics this service consumes (the cluster's, or one per namespace served)
        self.served: list[DeletionTopics] = []
        self.gatherer = FactGatherer(store, self.bk_store, self.offload, config.bookkeeper_ledgers_root_path)
        self.executor = Executor(self.bk_store, self.offload, RateLimiter(config.max_deletions_per_second),
                                 dry_run=dry_run)
        self.pipeline = DeletePipeline(self.gatherer, self.executor, self.metrics)
        self.worker: DeletePhaseWorker | None = None
        self._consumers: list = []
        self._sync_lock = threading.Lock()
        self.audit = audit  # every settled request gets one record (``deletion_service/audit/``)
        #: BookKeeper requests decided in a child process (``delete_phase/process/child.py``); None: here
        self.delete_process = delete_process
        #: ``run --tenant``/``--namespace``: the namespaces this daemon may act for (None: all)
        self.restricted_to: Callable[[str], bool] | None = None

    # ---- lifecycle

    def start(self, on_settled: Callable[[Settled], None] | None = None,
              namespaces: list[str] | None = None, drain_cluster_topics: bool = True) -> DeletePhaseWorker:
        """Consume the cluster's topics, or (namespace scope) those of ``namespaces``, plus, unless
        restricted, the cluster's too until they are empty: requests sent before a switch of scope."""
        requests, retries = ConsumerGroup(), ConsumerGroup()
        self._consumers = [requests, retries]
        if not self.namespace_scope:
            self._subscribe([self.topics])
        else:
            self._subscribe(self._unserved(([self.topics] if drain_cluster_topics else [])
                                           + [namespace_topics(ns, self.topics) for ns in namespaces or []]))
        guard = self._guard if self.namespace_scope else None
        hooks = Hooks(record=self.audit.on_settled if self.audit is not None else None,
                      on_settled=on_settled, guard=guard)
        lane = OffloadLane(self.pipeline, self.policy, self.gatherer.target_breakers,
                           batch_size=min(100, batch_size(self.config)))
        self.worker = DeletePhaseWorker(requests, retries, self.publisher, self.pipeline, self.policy, self.metrics,
                                        Limits(batch_size=batch_size(self.config),
                                               max_not_yet_due=self.config.ledger_deletion_max_held_in_memory), hooks,
                                        breakers=self.breakers(), offload_lane=lane,
                                        bookkeeper_lane=self._delete_process_lane(), seal=self._hold_seal())
        return self.worker

    def _hold_seal(self) -> HoldSeal:
        """The key that seals hold labels, from the metadata store (created there if missing).  None
        when the store cannot give it now: held requests then read ``unknown`` until the next start."""
        try:
            return MarkerKey.ensure(self.store).hold_seal()
        except MetadataStoreError as e:
            _log.warning("cannot read or create the signing key in the metadata store (%s): held requests show "
                         "no reason until the daemon restarts", e)
            return HoldSeal(None)

    def _delete_process_lane(self) -> DeleteProcessLane | None:
        spec = self.delete_process
        if spec is None:
            return None
        return DeleteProcessLane(lambda: DeleteProcess(spec, self.metrics.count_deletes), self.policy)

    def _guard(self, msg: Received, request: PendingDeleteLedgerInfo) -> str | None:
        """Namespace scope: why a request may not be acted on from where it was read.  A restricted
        daemon acts only for its own namespaces, whichever topic it read the request from: the cluster's
        topic is named like ``pulsar/system``'s own (without this check, ``run --namespace pulsar/system``
        would read every tenant's requests there and delete another tenant's ledger)."""
        why = cross_namespace(msg.topic, request.topic_name, self.topics)
        if why is None and self.restricted_to is not None \
                and not self.restricted_to(asked := namespace_of_topic(request.topic_name)):
            why = (f"cross-namespace: this daemon serves only its own namespaces, and the request read from "
                   f"{msg.topic} asks for a ledger of {request.topic_name}, in {asked}: parked for an "
                   "unrestricted daemon's operator")
        return why

    def serve_namespaces(self, namespaces: list[str]) -> list[str]:
        """Namespace scope: also consume these namespaces' topics (those not served yet); returns the new ones."""
        new = self._unserved([namespace_topics(ns, self.topics) for ns in namespaces])
        self._subscribe(new)
        return [t.namespace for t in new]

    def _unserved(self, topic_sets: list[DeletionTopics]) -> list[DeletionTopics]:
        """``topic_sets`` less those served already, each once.  The cluster topic's own namespace
        (``pulsar/system`` on every cluster) has the cluster's topics as its own: consumed twice, its
        requests would be settled twice and its DLQ listed twice."""
        seen = {t.base for t in self.served}
        out = []
        for topics in topic_sets:
            if topics.base not in seen:
                seen.add(topics.base)
                out.append(topics)
        return out

    def _subscribe(self, topic_sets: list[DeletionTopics]) -> None:
        """One consumer for these sets' request topics and one for their RETRY topics, added to the groups;
        producers (and so subscriptions) for RETRY and DLQ before the first message needs them."""
        if not topic_sets:
            return
        requests, retries = self._consumers
        partitions = [t for s in topic_sets for t in s.partition_topics]
        requests.add(partitions, self.broker.consumer(partitions, self.topics.subscription))
        retry_topics = [s.retry for s in topic_sets]
        retries.add(retry_topics, self.broker.consumer(retry_topics, self.topics.subscription))
        for s in topic_sets:
            self.publisher.prepare(s.retry, s.dlq)
            # A restarted broker reports a subscription's backlog only once the subscription is loaded:
            # touch the DLQ's, or the dlq_size gauge would read 0 with requests parked (nobody else does).
            try:
                self.broker.consumer([s.dlq], s.dlq_subscription, receiver_queue_size=1).close()
            except BrokerError as e:
                _log.warning("could not load the DLQ subscription of %s (%s): its gauge waits for it", s.dlq, e)
        self.served.extend(topic_sets)

    def breakers(self) -> Breakers:
        """One per metadata store: what a request's verification cannot do without."""
        stores = [("the metadata store", self.store)]
        if self.bk_store is not self.store:
            stores.append(("the BookKeeper metadata store", self.bk_store))
        return Breakers([Breaker(name, lambda s=store: s.get("/")) for name, store in stores])

    def close(self) -> None:
        if self.worker is not None and self.worker.bookkeeper_lane is not None:
            self.worker.bookkeeper_lane.stop(2.0)  # first: its process ends within the daemon's close bound
        if self.worker is not None and self.worker.offload_lane is not None:
            self.worker.offload_lane.stop(2.0)  # what it holds is unacked: back to the subscription below
        for consumer in self._consumers:
            consumer.close()
        self._consumers = []
        self.publisher.close()

    # ---- phase one

    def send_pending_delete(self, request: PendingDeleteLedgerInfo) -> str:
        message_id = self.publisher.send_request(request)
        self.metrics.sent.labels(type=request.ledger_type.value).inc()
        return message_id

    def send_pending_deletes(self, requests: Sequence[PendingDeleteLedgerInfo]) -> list[str | BrokerError]:
        """Each request to its partition, pipelined; a message id or the error for each, in order.  Only
        what the broker took is counted as sent."""
        answers = self.publisher.send_requests(requests)
        for request, answer in zip(requests, answers, strict=True):
            if isinstance(answer, str):
                self.metrics.sent.labels(type=request.ledger_type.value).inc()
        return answers

    def pending(self, payload: DeleteLedgerPayload, reason: Reason = Reason.MANUAL) -> PendingDeleteLedgerInfo:
        return PendingDeleteLedgerInfo(**payload.model_dump(), marked_at=int(time.time() * 1000), reason=reason)

    # ---- synchronous deletes (admin API)

    def delete_ledger(self, payload: DeleteLedgerPayload, reason: Reason = Reason.MANUAL) -> SyncResult:
        assert payload.ledger_type == LedgerType.LEDGER
        return self.delete_now(payload, reason)

    def delete_offloaded_ledger(self, payload: DeleteLedgerPayload, reason: Reason = Reason.MANUAL) -> SyncResult:
        assert payload.ledger_type == LedgerType.OFFLOAD_LEDGER
        return self.delete_now(payload, reason)

    def delete_now(self, payload: DeleteLedgerPayload, reason: Reason = Reason.MANUAL) -> SyncResult:
        """The admin API's delete: the consumer's pipeline, and the consumer's scope.  A daemon a tenant
        runs for its own namespaces (``run --tenant``) acts on nothing else through this door either."""
        asked = namespace_of_topic(payload.topic_name)
        if self.restricted_to is not None and not self.restricted_to(asked):
            return SyncResult(SyncOutcome.OUT_OF_SCOPE, f"this daemon serves only its own namespaces, not {asked}: "
                                                        "nothing verified or deleted")
        unrecorded = self.worker.disposer.trail_refused() if self.worker is not None else None
        if unrecorded is None and self.audit is not None:  # idle, so no record was refused yet: ask the trail
            unrecorded = self.audit.refusing or self.audit.writable()
        if unrecorded is not None:  # as the consumer: nothing deleted while the trail refuses records
            return SyncResult(SyncOutcome.UNAVAILABLE, f"{unrecorded}: nothing verified or deleted until it can be")
        request = self.pending(payload, reason)
        # No retry budget here: the caller is the one who retries, so "not yet" never turns into a DLQ verdict.
        policy = replace(self.policy, max_retries=2**31)
        with self._sync_lock:
            [action] = self.pipeline.run([request], [0], policy)
            if self.audit is not None:
                self.audit.on_sync(request, action)
        return sync_result(action)


def sync_result(action: Action) -> SyncResult:
    """The synchronous answer of a settled action: its outward form (``outcomes.outward``), and for a
    "not yet" when to ask again."""
    sync = outward(action).sync
    return SyncResult(sync, action.reason, retry_after_s=action.delay_s if sync == SyncOutcome.NOT_YET else None)


__all__ = ["LedgerDeletionService", "Settled", "SyncOutcome", "SyncResult", "policy_from", "sync_result"]
