"""How many messages the worker acknowledged per topic, over the last few seconds.

Why: ``run --exit-when-idle`` asks the broker for the subscription's backlog,
and the embedded broker's figure is refreshed only every ~10 s.  Right after a
drain it still shows messages this worker has since acknowledged, so the
daemon used to wait that staleness out after the work was done.  A stale
backlog on a topic is *explained* when the worker acknowledged at least that
many messages of the topic within the source's staleness bound: the figure
was taken before those acks, and they are gone.  Counting only whole
one-second buckets inside the bound errs towards "not explained".
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable


class AckTally:
    def __init__(self, horizon_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.horizon_s = horizon_s
        self._clock = clock
        self._buckets: dict[str, deque[list[int]]] = {}  # topic → [second, count], oldest first
        self._lock = threading.Lock()

    def record(self, topic: str, count: int = 1) -> None:
        """``count`` messages of ``topic`` acked just now (the disposer tells a batch's at its end)."""
        second = int(self._clock())
        with self._lock:
            buckets = self._buckets.setdefault(topic, deque())
            if buckets and buckets[-1][0] == second:
                buckets[-1][1] += count
            else:
                buckets.append([second, count])
            while buckets and buckets[0][0] < second - self.horizon_s:
                buckets.popleft()

    def since(self, topic: str, seconds: float) -> int:
        """Acks of ``topic`` in whole seconds that began within the last ``seconds``."""
        first = self._clock() - seconds
        with self._lock:
            return sum(n for second, n in self._buckets.get(topic, ()) if second >= first)

    def explains(self, backlog: dict[str, int], staleness_s: float) -> dict[str, int]:
        """The part of a backlog reading (up to ``staleness_s`` old) our own acks do not account for."""
        if staleness_s <= 0:
            return {t: n for t, n in backlog.items() if n}
        return {t: n for t, n in backlog.items() if n > self.since(t, staleness_s)}
