"""Names of the deletion topics and how a request picks its partition."""

from __future__ import annotations

from dataclasses import dataclass

from deletion_service.config import DeletionConfig


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

    @classmethod
    def from_config(cls, config: DeletionConfig) -> DeletionTopics:
        return cls(config.ledger_deletion_topic, config.two_phase_deletion_ledger_deletion_parallelism,
                   config.ledger_deletion_subscription, config.ledger_deletion_dlq_subscription)

    @property
    def partition_topics(self) -> list[str]:
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
