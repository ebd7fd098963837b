"""Names of the deletion topics and how a request picks its partition (and, per namespace, its topic).

``ledgerDeletionTopicScope = namespace``: each namespace has its own request topic
``persistent://<tenant>/<ns>/__ledger_deletion`` (not partitioned) with ``-RETRY`` and
``-DLQ`` beside it, so the right to produce to a namespace's topics (which Pulsar grants per
namespace) is the right to ask for that namespace's ledgers, and one tenant's backlog never
delays another's.  :func:`beside` finds the topics a received message belongs to from the
topic the broker says it came from, never from a property a producer could forge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from deletion_service.config import DeletionConfig

#: A namespace's request topic's local name (namespace scope).
NAMESPACE_TOPIC = "__ledger_deletion"
_PARTITION = re.compile(r"-partition-\d+$")


@dataclass(frozen=True)
class DeletionTopics:
    """The request topic's partitions, RETRY and DLQ, and their subscriptions.

    Producers address partitions by name (``…-partition-N``) rather than
    relying on a client-side router, so the same code works on a real
    partitioned topic and on the embedded broker, which has no admin API to
    create partitioned-topic metadata.
    """

    base: str
    partitions: int
    subscription: str = "ledger-deletion"
    dlq_subscription: str = "ledger-deletion-dlq"
    #: False for a namespace's request topic: the base itself takes the requests
    partitioned: bool = True

    @classmethod
    def from_config(cls, config: DeletionConfig) -> DeletionTopics:
        return cls(config.ledger_deletion_topic, config.two_phase_deletion_ledger_deletion_parallelism,
                   config.ledger_deletion_subscription, config.ledger_deletion_dlq_subscription)

    @classmethod
    def for_namespace(cls, namespace: str, config: DeletionConfig) -> DeletionTopics:
        """A namespace's own topics (``tenant/ns``)."""
        return cls(f"persistent://{namespace}/{NAMESPACE_TOPIC}", 1, config.ledger_deletion_subscription,
                   config.ledger_deletion_dlq_subscription, partitioned=False)

    @property
    def namespace(self) -> str:
        """``tenant/ns`` of these topics."""
        return self.base.removeprefix("persistent://").rsplit("/", 1)[0]

    @property
    def partition_topics(self) -> list[str]:
        if not self.partitioned:
            return [self.base]
        return [f"{self.base}-partition-{i}" for i in range(self.partitions)]

    @property
    def retry(self) -> str:
        return f"{self.base}-RETRY"

    @property
    def dlq(self) -> str:
        return f"{self.base}-DLQ"

    @property
    def consumed(self) -> list[str]:
        """What the delete phase subscribes to: every partition and RETRY."""
        return [*self.partition_topics, self.retry]

    def partition_for(self, ledger_id: int) -> str:
        """Requests for one ledger always land on one partition, so duplicates meet in order."""
        return self.partition_topics[ledger_id % self.partitions]

    def subscription_for(self, topic: str) -> str:
        return self.dlq_subscription if topic == self.dlq else self.subscription


def family(topic: str) -> str:
    """The request topic a deletion topic belongs to: ``…-partition-N``, ``-RETRY`` and ``-DLQ`` stripped."""
    base = _PARTITION.sub("", topic)
    for suffix in ("-RETRY", "-DLQ"):
        base = base.removesuffix(suffix)
    return base


def beside(topic: str, cluster: DeletionTopics) -> DeletionTopics:
    """The deletion topics a message received on ``topic`` belongs to: the cluster's, or the
    namespace's whose request, RETRY or DLQ topic it is."""
    base = family(topic)
    if base == cluster.base:
        return cluster
    return replace(cluster, base=base, partitions=1, partitioned=False)


def namespace_topics(namespace: str, like: DeletionTopics) -> DeletionTopics:
    """``tenant/ns``'s own deletion topics, with ``like``'s subscriptions."""
    return beside(f"persistent://{namespace}/{NAMESPACE_TOPIC}", like)


def namespace_of_topic(topic: str) -> str:
    """``tenant/ns`` of a full topic name (``persistent://tenant/ns/local``)."""
    return "/".join(topic.split("://", 1)[-1].split("/")[:2])


def tenant_of_topic(topic: str) -> str:
    """``tenant`` of a full topic name (``persistent://tenant/ns/local``)."""
    return namespace_of_topic(topic).split("/", 1)[0]
