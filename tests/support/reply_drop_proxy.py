"""A loopback TCP proxy in front of the real ZooKeeper that loses the reply of a multi-op, or goes silent.

It forwards every request and reply unchanged, except that when armed it lets the next multi request
through, waits for the server's reply to it (so the multi is known to be applied, or refused), drops
that reply and closes the connection.  kazoo reconnects through the proxy within the same session, as
it does after a network blip.  No real ZooKeeper loses a reply on demand.

Silenced (:meth:`ReplyDropProxy.silence`), it swallows every frame both ways and closes new
connections at once: a client cut off from ZooKeeper by the network, while the server goes on
(and expires its session).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

MULTI = 14  # ZooKeeper's opcode of a multi-op (OpCode.multi)


class ReplyDropProxy:
    """127.0.0.1:<free port> → the real ZooKeeper.  Frames are ZooKeeper's: a 4-byte length, then the
    body; a request body starts with (xid, type), a reply body with (xid, zxid, err); each
    connection's first frame each way is the session handshake."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._armed = 0
        self._silent = False
        self.dropped = 0
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, name="zk-proxy", daemon=True).start()

    def arm(self, times: int = 1) -> None:
        """Drop the reply of the next ``times`` multi-ops (each with its connection)."""
        with self._lock:
            self._armed = times

    def silence(self, silent: bool = True) -> None:
        """Swallow every frame and refuse every new connection (True) until called with False."""
        with self._lock:
            self._silent = silent

    def close(self) -> None:
        self._listener.close()
        for s in self._sockets:
            _close(s)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._silent:
                _close(client)
                continue
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            self._sockets += [client, upstream]
            doomed: dict[str, int] = {}
            threading.Thread(target=self._requests, args=(client, upstream, doomed), daemon=True).start()
            threading.Thread(target=self._replies, args=(upstream, client, doomed), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket, doomed: dict[str, int]) -> None:
        first = True
        while (frame := _frame(client)) is not None:
            if not first and len(frame) >= 12:
                xid, op = struct.unpack(">ii", frame[4:12])
                with self._lock:
                    if op == MULTI and self._armed > 0:
                        self._armed -= 1
                        doomed["xid"] = xid  # before it is sent: its reply cannot come earlier
            first = False
            if self._silent:
                continue
            try:
                upstream.sendall(frame)
            except OSError:
                break
        _close(client, upstream)

    def _replies(self, upstream: socket.socket, client: socket.socket, doomed: dict[str, int]) -> None:
        first = True
        while (frame := _frame(upstream)) is not None:
            if not first and len(frame) >= 8 and struct.unpack(">i", frame[4:8])[0] == doomed.get("xid"):
                with self._lock:
                    self.dropped += 1
                break  # the server answered (applied or refused); the client never hears it
            first = False
            if self._silent:
                continue
            try:
                client.sendall(frame)
            except OSError:
                break
        _close(client, upstream)


def _frame(sock: socket.socket) -> bytes | None:
    """One whole frame (length prefix included), or None at the end of the stream."""
    head = _exactly(sock, 4)
    if head is None:
        return None
    body = _exactly(sock, struct.unpack(">i", head)[0])
    return None if body is None else head + body


def _exactly(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        try:
            chunk = sock.recv(n - len(data))
        except OSError:
            return None
        if not chunk:
            return None
        data += chunk
    return data


def _close(*sockets: socket.socket) -> None:
    for s in sockets:
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        s.close()
