"""One holder of a role among the daemons of a cluster, elected with kazoo's lock recipe.

Every contender queues an ephemeral sequential node under the role's path (kazoo's ``Lock``); the
first in line holds the role.  A holder whose process dies loses its node with its session, so the
next in line takes over within the session timeout.

The care here is about *believing* one holds it.  kazoo tells the connection's state changes to a
listener: on SUSPENDED (the server may already have expired the session and elected another) or
LOST, :meth:`ZooKeeperLeadership.holds` turns False at once, and the role is given up and contended
for again once connected, never resumed silently.  Between a ``holds()`` and what the holder then
does, another may take over; whoever uses the role must stay safe with two holders for a moment
(the leak watcher's requests are claims the delete phase verifies, so a duplicate costs nothing).
"""

from __future__ import annotations

import logging
import threading
from typing import Final

from kazoo import exceptions as kx
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from metastore.interface import Leadership

_log = logging.getLogger(__name__)

#: How long the contending thread waits between two tries when ZooKeeper is away.
RETRY_S: Final = 0.5


class ZooKeeperLeadership(Leadership):
    """Contends on its own thread from construction until :meth:`close`."""

    def __init__(self, client: KazooClient, path: str, identifier: str) -> None:
        self.path, self.identifier = path, identifier
        self._client = client
        self._lock = client.Lock(path, identifier)
        self._held = threading.Event()
        self._interrupted = threading.Event()  # the connection left CONNECTED while the role was held
        self._closed = threading.Event()
        client.add_listener(self._on_state)
        self._thread = threading.Thread(target=self._contend, name=f"leadership {path}", daemon=True)
        self._thread.start()

    def holds(self) -> bool:
        return self._held.is_set() and self._client.state == KazooState.CONNECTED

    def holder(self) -> str | None:
        try:
            contenders = self._lock.contenders()
        except kx.KazooException:
            return None
        return contenders[0] if contenders else None

    def close(self) -> None:
        self._closed.set()
        self._held.clear()
        self._interrupted.set()
        self._lock.cancel()
        self._client.remove_listener(self._on_state)
        self._thread.join(0.5)  # it only deletes its lock node; the node goes with the session anyway

    def _on_state(self, state: KazooState) -> None:
        """kazoo's connection thread: must not block.  Anything but CONNECTED ends the role here."""
        if state != KazooState.CONNECTED:
            self._held.clear()
            self._interrupted.set()

    def _contend(self) -> None:
        while not self._closed.is_set():
            if self._client.state != KazooState.CONNECTED:
                self._closed.wait(RETRY_S)
                continue
            self._interrupted.clear()
            try:
                acquired = self._lock.acquire()  # blocks until first in line, or cancelled by close()
            except kx.CancelledError:
                return
            except kx.KazooException as e:
                _log.info("contending for %s: %s; trying again", self.path, type(e).__name__)
                self._closed.wait(RETRY_S)
                continue
            if acquired and not self._interrupted.is_set() and not self._closed.is_set():
                self._held.set()
                _log.info("%s holds %s", self.identifier, self.path)
                self._interrupted.wait()  # until the connection is interrupted or close()
                self._held.clear()
                if not self._closed.is_set():
                    _log.warning("%s gave up %s: the ZooKeeper connection was interrupted; contending again",
                                 self.identifier, self.path)
            self._release()

    def _release(self) -> None:
        try:
            self._lock.release()
        except kx.KazooException as e:  # the node goes with the session anyway
            _log.info("releasing %s: %s", self.path, type(e).__name__)
