"""The ZooKeeper backend's connection: connect, authenticate, chroot, and send one request with a deadline.

kazoo's synchronous calls wait without a deadline while the server is away; a
daemon must fail fast instead and let its retry policy decide, so every request
goes through :meth:`ZooKeeperConnection.call`: tried once, refused at once when
not connected, its reply awaited at most the session timeout.  The connection
also counts kazoo's state changes, so a caller can wait out a connection the
server closes on purpose (after refusing a multi-read, see
:mod:`metastore.zookeeper.batch_reads`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from kazoo import exceptions as kx
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from kazoo.retry import KazooRetry

from metastore.interface import MetadataStoreError, MetadataStoreUnavailable
from metastore.url import ZooKeeperUrl
from metastore.zookeeper.kazoo_errors import NotConnected, describe
from metastore.zookeeper.multiread import MultiListChildren, MultiRead

DIGEST_ENV = "LEDGER_DELETION_METADATA_STORE_DIGEST"
#: How long a server that refused a multi-read may take to drop the connection (ZooKeeper
#: closes it right after the reply) before the store takes it that the connection stays.
DROP_GRACE_S: Final = 1.0


class ZooKeeperConnection:
    """One kazoo client, started, authenticated and chrooted; its requests, each tried once."""

    def __init__(self, url: ZooKeeperUrl, digest_file: Path | None = None, connect_timeout_s: float = 5.0,
                 session_timeout_s: float = 10.0) -> None:
        self.url = url
        hosts = ",".join(f"{h}:{p}" for h, p in url.hosts)
        self.client = KazooClient(
            hosts=hosts,
            timeout=session_timeout_s,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=2),
            command_retry=None,
        )
        try:
            # kazoo is unannotated: the checker takes ``start``'s default 15 for an int, though kazoo
            # only waits on an Event with it, which takes seconds as a float.
            self.client.start(timeout=connect_timeout_s)  # pyright: ignore[reportArgumentType]
        except KazooTimeoutError as e:
            self.client.close()
            raise MetadataStoreUnavailable(
                f"cannot connect to ZooKeeper at {hosts} within {connect_timeout_s:g}s: "
                "is it running and reachable? (check --metadata-store)"
            ) from e
        try:
            digest = read_digest(digest_file)
            if digest:
                self.client.add_auth("digest", digest)
            if url.chroot:
                self.client.ensure_path(url.chroot)
                self.client.chroot = url.chroot
        except (kx.KazooException, MetadataStoreError) as e:
            self.client.stop()
            self.client.close()
            if isinstance(e, MetadataStoreError):
                raise
            raise MetadataStoreUnavailable(f"ZooKeeper at {hosts}: {describe(e)}") from e
        self.op_timeout_s = session_timeout_s
        #: Connection state changes seen (SUSPENDED, LOST, CONNECTED), under ``_state_changed``.
        self.transitions = 0
        self._state_changed = threading.Condition()
        self.client.add_listener(self._on_state)

    @property
    def connected(self) -> bool:
        return self.client.state == KazooState.CONNECTED

    def call(self, fn_async: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:  # noqa: ANN401 - kazoo's async API is untyped
        """Run one request, once, with a deadline; not connected (e.g. mid-reconnect) fails at once,
        as ``ConnectionLoss``."""
        if not self.connected:
            raise NotConnected("not connected to ZooKeeper")
        return self.reply(fn_async(*args, **kwargs))

    def reply(self, result: Any) -> Any:  # noqa: ANN401 - kazoo's IAsyncResult and its values are untyped
        """A sent request's reply (data and stat, children, a stat), waited for until the operation deadline."""
        return result.get(timeout=self.op_timeout_s)

    def send(self, request: MultiRead | MultiListChildren) -> Any:  # noqa: ANN401 - kazoo's IAsyncResult
        """Queue a request kazoo does not know on its connection, as kazoo queues its own.

        kazoo has no public call for a request type it does not know; ``_call`` is
        the one door every kazoo request goes through (state checks, queue, wake-up)."""
        reply = self.client.handler.async_result()
        self.client._call(request, reply)
        return reply

    def server_paths(self, chunk: list[str]) -> list[str]:
        """The chroot applied, as kazoo applies it to its own requests' paths."""
        root = self.client.chroot or ""
        return [root + p if p != "/" else (root or "/") for p in chunk]

    def await_new_connection(self, transitions: int) -> None:
        """Wait out the connection ZooKeeper closes after answering a multi-read UNIMPLEMENTED.

        ``transitions``: the state changes seen before that multi-read was sent.  A server
        that keeps the connection shows no state change within ``DROP_GRACE_S``; one that
        drops it must be back within the request timeout.
        """
        with self._state_changed:
            if not self._state_changed.wait_for(lambda: self.transitions > transitions, DROP_GRACE_S):
                return
            if not self._state_changed.wait_for(lambda: self.client.state == KazooState.CONNECTED,
                                                self.op_timeout_s):
                raise MetadataStoreUnavailable(
                    f"ZooKeeper at {self.url.connect_string} closed the connection after refusing a "
                    "multi-read and is not back yet; later reads use one request per node")

    def _on_state(self, state: KazooState) -> None:
        """kazoo's state listener (its connection thread): count transitions for ``await_new_connection``."""
        with self._state_changed:
            self.transitions += 1
            self._state_changed.notify_all()

    def close(self) -> None:
        try:
            self.client.stop()
        finally:
            self.client.close()


def read_digest(digest_file: Path | None) -> str | None:
    """The ``user:password`` digest secret, from ``digest_file`` or else ``DIGEST_ENV``; None when neither."""
    if digest_file is not None:
        try:
            value = Path(digest_file).read_text().strip()
        except OSError as e:
            raise MetadataStoreError(f"cannot read ZooKeeper digest file {digest_file}: {e.strerror}") from e
    else:
        value = os.environ.get(DIGEST_ENV, "").strip()
        if not value:
            return None
    if ":" not in value:
        raise MetadataStoreError("ZooKeeper digest secret must be 'user:password'")
    return value
