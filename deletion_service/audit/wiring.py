"""The daemon's audit writer, from the config: where the trail lives, how big a file grows, the topic copy."""

from __future__ import annotations

from pathlib import Path

from deletion_service.audit import trail
from deletion_service.audit.publish import TopicCopy, audit_topic
from deletion_service.audit.writer import AuditWriter
from deletion_service.broker.interface import BrokerClient
from deletion_service.config import DeletionConfig


def daemon_writer(config: DeletionConfig, data_dir: Path, broker: BrokerClient) -> AuditWriter:
    """``<data-dir>/audit/``, rotated at ``ledgerDeletionAuditFileMaxBytes``; with
    ``ledgerDeletionAuditTopicEnabled``, every record also goes to ``<ledgerDeletionTopic>-AUDIT``."""
    copy = TopicCopy(broker, audit_topic(config.ledger_deletion_topic)) \
        if config.ledger_deletion_audit_topic_enabled else None
    return AuditWriter(trail.audit_dir(data_dir), config.ledger_deletion_audit_file_max_bytes, publish=copy)
