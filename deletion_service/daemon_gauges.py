"""The daemon's backlog gauges: requests in flight and the DLQ's size, read from the broker's statistics.

A gauge that says 0 while requests are parked is worse than no gauge: an alert
trusts it.  Right after a start the broker's statistics may not yet count what
the last run left (:attr:`BacklogSource.staleness_s`), so nothing is set until
they can be trusted; until that first trusted reading the gauges are tried
every second, then every ``refresh_s``.  A broker that cannot say is logged
once, not on every try.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from deletion_service.broker.interface import BrokerError
from deletion_service.inflight import BacklogSource
from deletion_service.metrics import DeletionMetrics
from deletion_service.topics import DeletionTopics

_log = logging.getLogger("deletion_service.daemon")  # the daemon's pieces log under one name, as before the split


class BacklogGauges:
    """Sets ``estimated_inflight`` and ``dlq_size`` from one reading each over every topic set served."""

    def __init__(self, metrics: DeletionMetrics, backlog: BacklogSource, served: Callable[[], list[DeletionTopics]],
                 subscriptions: DeletionTopics, refresh_s: float, clock: Callable[[], float],
                 started_at: float) -> None:
        self.metrics, self.backlog, self._served, self._subscriptions = metrics, backlog, served, subscriptions
        self.refresh_s, self._clock, self._started_at = refresh_s, clock, started_at
        self._last_refresh = 0.0
        self._warned = False
        self._read = False

    def refresh_if_due(self) -> None:
        """Until the first trusted reading, every second; then every ``refresh_s``."""
        every = self.refresh_s if self._read else 1.0
        if self._clock() - self._last_refresh >= every:
            self.refresh()

    def refresh(self) -> None:
        """The gauges, once the broker's statistics can be trusted: not before they were refreshed
        after this daemon started (``staleness_s``), or they would say 0 for requests parked."""
        self._last_refresh = self._clock()
        if self._clock() - self._started_at < self.backlog.staleness_s:
            return
        try:
            served, subs = self._served(), self._subscriptions
            # one reading each for every namespace served (a broker's statistics are one page)
            consumed = [c for t in served for c in t.consumed]
            self.metrics.estimated_inflight.set(sum(self.backlog.backlog(consumed, subs.subscription).values()))
            self.metrics.dlq_size.set(sum(self.backlog.backlog([t.dlq for t in served],
                                                               subs.dlq_subscription).values()))
            self._read = True
        except BrokerError as e:
            if not self._warned:
                _log.warning("cannot refresh backlog gauges: %s", e)
                self._warned = True
