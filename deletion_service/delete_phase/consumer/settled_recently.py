"""The messages this worker settled lately: a redelivery of one is acknowledged again, not settled twice.

Why: an ack is fire-and-forget in the client (pulsar-client has no ack
receipts), so acks sent into a broker that dies before it persists them are
lost, and the restarted broker redelivers those messages.  Settling them again
is safe (deletion is idempotent) but wrong in every other way: each counted
twice in ``…_acked_total`` (a deleted ledger then shows up again as "absent"),
audited twice, and a RETRY or DLQ copy published twice.  A message this process
settled — its disposition done, ack sent — needs only the ack again.

A message is known by its topic, its id *and its payload's digest*: ids are the
broker's word, and a broker that lost its data could hand an old id to a new
message.  Only a byte-identical redelivery under the same id is taken for a
repeat; anything else is settled as usual.  When in doubt it is processed,
never skipped.

Bounded (the oldest forgotten first): a forgotten message is settled again,
which costs a duplicate count, never a ledger.  Within one process only: after a
daemon restart, redeliveries are settled again (and the audit trail shows those
requests twice, which is why its records are written before the ack: a
duplicate is recoverable, a missing record is not).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

from deletion_service.broker.interface import Received

#: How many settled messages are remembered: more than a broker's redelivery can bring back at
#: once (receiver queues of 1,000 per consumer, 10,000 held RETRY messages), at ~100 bytes each.
DEFAULT_CAPACITY = 65_536


def _key(msg: Received) -> bytes:
    return hashlib.blake2b(b"\0".join((msg.topic.encode(), msg.message_id.encode(), msg.data)),
                           digest_size=16).digest()


class SettledRecently:
    """Not thread-safe, and need not be: only the worker thread receives and disposes of messages."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._keys: OrderedDict[bytes, None] = OrderedDict()

    def add(self, msg: Received) -> None:
        """``msg`` is settled and its ack sent."""
        key = _key(msg)
        self._keys[key] = None
        self._keys.move_to_end(key)
        while len(self._keys) > self.capacity:
            self._keys.popitem(last=False)

    def __contains__(self, msg: Received) -> bool:
        return _key(msg) in self._keys

    def __len__(self) -> int:
        return len(self._keys)
