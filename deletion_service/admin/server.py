"""Run the admin app with uvicorn in a background thread of the daemon.

The listening socket is bound here, in :meth:`AdminServer.start`, before
uvicorn sees it: a port in use then fails the daemon's start with one clear
line instead of a log message from a thread nobody waits on, and port 0 works
(``.url`` tells the port the kernel picked).
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import socket
import threading
import time

import uvicorn
from fastapi import FastAPI

from deletion_service.errors import UsageError, UserError

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[v6]:PORT`` → (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise UsageError(f"invalid admin address {address!r}: expected HOST:PORT, e.g. 127.0.0.1:8090")
    return host.removeprefix("[").removesuffix("]"), int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name could resolve anywhere: treat it as reachable from outside


class AdminServer:
    def __init__(self, app: FastAPI, address: str, token_configured: bool) -> None:
        self.app = app
        self.host, self.port = parse_address(address)
        self.token_configured = token_configured
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> AdminServer:
        if not is_loopback(self.host) and not self.token_configured:
            raise UserError(f"admin address {self.host}:{self.port}: a non-loopback address requires an admin token "
                            "(set adminTokenFile or LEDGER_DELETION_ADMIN_TOKEN), or listen on 127.0.0.1")
        self._socket = self._bind()
        self.port = self._socket.getsockname()[1]
        config = uvicorn.Config(
            self.app, log_config=None, log_level="warning", access_log=False,  # no request lines, so no headers
            server_header=False, timeout_graceful_shutdown=5, limit_concurrency=64, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]},
                                        name="admin-http", daemon=True)
        self._thread.start()
        self._wait_started()
        return self

    def _bind(self) -> socket.socket:
        try:
            infos = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        except socket.gaierror as e:
            raise UserError(f"admin address {self.host}:{self.port}: cannot resolve {self.host!r}: {e.strerror}") from e
        family, kind, proto, _, sockaddr = infos[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # restart while old connections sit in TIME_WAIT
        try:
            sock.bind(sockaddr)
            sock.listen(128)
        except OSError as e:
            sock.close()
            if e.errno == errno.EADDRINUSE:
                raise UserError(f"admin address {self.host}:{self.port} is already in use: stop what listens there "
                                "or choose another --admin-address") from e
            raise UserError(f"cannot listen on admin address {self.host}:{self.port}: {e.strerror}") from e
        sock.set_inheritable(True)
        return sock

    def _wait_started(self) -> None:
        assert self._server is not None and self._thread is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and self._thread.is_alive():
            if self._server.started:
                return
            time.sleep(0.02)
        self.stop()
        raise UserError(f"admin API did not start on {self.url}")

    def stop(self) -> None:
        """Graceful: stop accepting, let requests in hand finish (up to 5 s), then close."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(STOP_TIMEOUT_S)
            if self._thread.is_alive() and self._server is not None:
                self._server.force_exit = True
                self._thread.join(STOP_TIMEOUT_S)
        if self._socket is not None:
            with contextlib.suppress(OSError):
                self._socket.close()
        self._server = self._thread = self._socket = None

    def __enter__(self) -> AdminServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
