"""Supervise the embedded broker a daemon owns: restart it when it dies, or give up loudly.

Without supervision, a daemon whose pulsar-lite was killed would stay up
forever, ``/healthz`` would say 200 so no liveness probe restarted it, and other
commands would start a second broker on the same data dir.  So the daemon checks
its broker's process every second.  A dead one is restarted on the same ports
(the client reconnects to the same URL; the broker's database keeps every
message and subscription).  If restarts keep failing, the supervisor gives up:
``/healthz`` turns 503 and ``run`` exits with an ERROR, so its own supervisor
(Kubernetes, systemd) restarts the whole process.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

from deletion_service.errors import UserError

from .broker import EmbeddedBroker

_log = logging.getLogger(__name__)

#: More restarts than this within WINDOW_S means the broker cannot stay up: give up.
MAX_RESTARTS = 3
WINDOW_S = 60.0


class BrokerSupervisor:
    def __init__(self, broker: EmbeddedBroker, clock: Callable[[], float] = time.monotonic) -> None:
        self.broker = broker
        self.clock = clock
        self.restarts: deque[float] = deque()
        #: Why the supervisor gave up (the daemon exits); None while the broker is looked after.
        self.failure: str | None = None

    def check(self) -> bool:
        """True while the broker runs (restarting it if it died); False once given up."""
        if self.failure is not None:
            return False
        if self.broker.process_alive():
            return True
        info = self.broker.info
        assert info is not None
        now = self.clock()
        while self.restarts and now - self.restarts[0] > WINDOW_S:
            self.restarts.popleft()
        if len(self.restarts) >= MAX_RESTARTS:
            return self._give_up(f"the embedded broker died {MAX_RESTARTS + 1} times within {WINDOW_S:.0f} s; "
                                 f"see {self.broker.broker_dir / 'broker.log'}")
        _log.error("embedded broker (pid %d) exited; restarting it on %s", info.pid, info.serviceUrl)
        self.restarts.append(now)
        try:
            new = self.broker.restart()
        except (UserError, OSError) as e:
            return self._give_up(f"the embedded broker died and could not be restarted: {e}")
        _log.warning("embedded broker restarted (pid %d) on %s", new.pid, new.serviceUrl)
        return True

    def _give_up(self, why: str) -> bool:
        self.failure = why
        _log.error("%s; exiting so that this daemon's supervisor restarts it", why)
        return False
