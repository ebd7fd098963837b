"""The optional copy of every record on a topic ``<deletion topic>-AUDIT`` (``ledgerDeletionAuditTopicEnabled``).

A copy outside the data dir is what makes the chain worth trusting: whoever edits
the files must also rewrite a topic they may not be able to write.  The file stays
the record of truth, so the copy is best effort and never holds up a settle: lines
go through a bounded queue to a thread that sends them; when the broker refuses,
they are dropped with a WARNING (at most one a minute), and the file still has them.
A subscription is made before the first send, so the broker retains what it gets.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time

from deletion_service.broker.interface import BrokerClient, Producer

_log = logging.getLogger(__name__)

SUBSCRIPTION = "ledger-deletion-audit"


def audit_topic(deletion_topic: str) -> str:
    return f"{deletion_topic}-AUDIT"


class TopicCopy:
    def __init__(self, broker: BrokerClient, topic: str, capacity: int = 10_000) -> None:
        self.broker, self.topic = broker, topic
        self._queue: queue.Queue[str | None] = queue.Queue(capacity)
        self._producer: Producer | None = None
        self._warned_at = 0.0
        self.dropped = 0
        self._thread = threading.Thread(target=self._loop, name="audit-topic", daemon=True)
        self._thread.start()

    def __call__(self, line: str) -> None:
        try:
            self._queue.put_nowait(line)
        except queue.Full:
            self._drop("the queue is full")

    def close(self, wait_s: float = 5.0) -> None:
        """Send what is queued (for at most ``wait_s``), then stop."""
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=wait_s)
        self._thread.join(wait_s)
        if self._producer is not None:
            self._producer.close()

    def _loop(self) -> None:
        while (line := self._queue.get()) is not None:
            try:
                if self._producer is None:
                    self.broker.ensure_subscription(self.topic, SUBSCRIPTION)
                    self._producer = self.broker.producer(self.topic)
                self._producer.send(line.encode())
            except Exception as e:  # noqa: BLE001 - a copy; the file has the record
                self._drop(f"{type(e).__name__}: {e}")

    def _drop(self, why: str) -> None:
        self.dropped += 1
        now = time.monotonic()
        if now - self._warned_at >= 60:
            self._warned_at = now
            _log.warning("audit records not copied to %s (%d so far; the audit files have them): %s",
                         self.topic, self.dropped, why)
