"""Flow permits: how many more messages each consumer may be sent.

A consumer added with permits gets only that many messages until it sends
more (``flow``); one added without is outside flow control (the model's
default), and then the dispatcher reads its full batch.  A flow that arrives
while a read position change runs does not read (stage 1 of the seek-epoch
proposal: check the cursor's state on flow permits): the read is held and
starts when the change ends, from the new position.
"""

from __future__ import annotations

from .consumers import ConsumerSet


class FlowPermits:
    """The permits of a dispatcher's consumers, and whether a read waits for the running change to end."""

    def __init__(self, consumers: ConsumerSet) -> None:
        self._consumers = consumers
        self._read_held = False

    def available(self) -> int | None:
        """Messages the connected consumers may still take; None when one is outside flow control."""
        total = 0
        for consumer in self._consumers.connected.values():
            if consumer.permits is None:
                return None
            total += max(consumer.permits, 0)
        return total

    def grant(self, name: str, permits: int) -> bool:
        """``name`` may take ``permits`` more messages; False for an unknown consumer.

        A consumer waiting to join (it connected during a change) is granted all the same.
        """
        if permits < 0:
            raise ValueError(f"flow permits must be >= 0, got {permits}")
        consumer = self._consumers.find(name)
        if consumer is None:
            return False
        consumer.permits = (consumer.permits or 0) + permits
        return True

    def hold_read(self) -> None:
        """A change runs: the read these permits ask for starts when it ends."""
        self._read_held = True

    def take_held_read(self) -> bool:
        """Whether a read was held for the end of the change; none is held afterwards."""
        held, self._read_held = self._read_held, False
        return held
