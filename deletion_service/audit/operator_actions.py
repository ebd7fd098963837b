"""Records of what an operator does to the DLQ: ``dlq purge`` drops parked requests, ``dlq requeue``
sends them back.  Who dropped or sent back which request, and when, is an audit fact like a deletion.

They go to the same trail as the daemon's records, through the same writer (:mod:`.writer`: locked,
chained, rotated, copied to the ``-AUDIT`` topic when that is on), in the same format
(:mod:`.record`), one record per request:

- ``request``: the parked request as listed (``null`` when its payload is undecodable);
- ``outcome``: :data:`PURGED` or :data:`REQUEUED` (the DLQ's own words, apart from the daemon's
  :class:`~deletion_service.protocol.fate.Outcome`, so a count of deletions never counts these);
- ``reason``: the command, the operator (the OS user, the host), the message id and DLQ it left, why
  it was parked, and for a requeue the topic and message id it went back as (the daemon's record of
  that message names the same request later);
- ``evidence``: empty, as for any record that deleted nothing;
- ``at`` and ``daemon``: when, and which process wrote it, as the writer stamps every record.

Written after a requeue's sends and before the DLQ acks anything (the daemon's order: act, record,
ack).  A trail that cannot be written stops the command before its first ack: nothing leaves the DLQ
unrecorded, and a command retried after a failure may record a request twice, never not at all.
"""

from __future__ import annotations

import getpass
import hashlib
import os
import socket
from collections.abc import Sequence
from pathlib import Path

from deletion_service.audit.record import Entry, evidence_json
from deletion_service.audit.writer import daemon_writer
from deletion_service.broker.interface import BrokerClient
from deletion_service.config import DeletionConfig
from deletion_service.dlq.operations import Recorder, Settling

PURGED = "purged"
REQUEUED = "requeued"
#: The outcomes of these records, for readers that filter by outcome.
OUTCOMES = (PURGED, REQUEUED)


class NotRecorded(Exception):
    """The trail refused the records: the command acked nothing."""


def operator() -> str:
    """Who ran the command: the OS user (the uid when it has no name) at this host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid {os.getuid()}"
    return f"{user}@{socket.gethostname()}"


def entry(outcome: str, settling: Settling, who: str) -> Entry:
    """One request's record: the request as listed, and the reason in words that name everything."""
    e = settling.entry
    command = "dlq purge" if outcome == PURGED else "dlq requeue"
    words = f"{command} by {who}: message {e.message_id} left {settling.dlq}"
    words += f" (parked for {e.reason or 'no reason given'}, {e.attempts} attempt(s))"
    if settling.sent_to is not None:
        words += f"; sent back to {settling.sent_to} as {settling.sent_as}"
    if e.request is None:
        data = settling.message.data
        words += f"; undecodable payload: {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}"
    return Entry(e.request, outcome, words, evidence_json(None))


def recorder(config: DeletionConfig, data_dir: Path, broker: BrokerClient, outcome: str,
             who: str | None = None) -> Recorder:
    """What ``dlq purge``/``requeue`` hand their requests to: one record each, appended as one batch
    to ``<data-dir>/audit/`` and synced before it returns; :class:`NotRecorded` when the trail refuses."""
    name = who or operator()

    def record(settling: Sequence[Settling]) -> None:
        writer = daemon_writer(config, data_dir, broker)
        done: list[tuple[dict, str]] = []
        try:
            writer.append_all([entry(outcome, s, name) for s in settling], done)
        except OSError as e:
            raise NotRecorded(f"the audit trail in {writer.directory} cannot be written ({e})") from e
        finally:
            if writer.publish is not None:  # the -AUDIT topic copy, as the daemon's hook hands it
                for _, text in done:
                    writer.publish(text)
            writer.close()

    return record
