"""A tiny loopback HTTP proxy that injects faults a real server will not produce.

It listens on 127.0.0.1 on a free port and forwards every request to an
upstream HTTP server (e.g. ``moto_server``) unchanged -- unless a fault is set:

* ``Fault.status(500)`` / ``Fault.status(503, "SlowDown")``: answer with that
  status and an S3-style XML error body, without contacting the upstream;
* ``Fault.delay(seconds)``: hold the request (longer than the client's read
  timeout), then answer 503 -- the client should have given up by then;
* ``Fault.reset()``: close the connection without answering;
* ``Fault.body(200, xml)``: answer with a canned body (e.g. a DeleteObjects
  result listing per-key errors, which moto never reports).

``methods`` narrows a fault to some HTTP methods (e.g. only the DELETE after the
HEADs succeeded, or only GET); ``times`` limits how many requests get the fault
(then it forwards again), so a test can also show that a retry succeeds.  Point
a client at ``proxy.endpoint``.
S3 signatures cover the Host header; moto does not check them, so forwarding
with the proxy's own host is fine.
"""

from __future__ import annotations

import http.client
import socket
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te"}


@dataclass(frozen=True)
class Fault:
    kind: str  # "status" | "delay" | "reset" | "body"
    status_code: int = 500
    code: str = "InternalError"
    seconds: float = 0.0
    #: Only requests with these HTTP methods get the fault (None: all).
    methods: frozenset[str] | None = None
    payload: bytes = b""

    @classmethod
    def status(cls, status_code: int, code: str | None = None, methods: set[str] | None = None) -> Fault:
        default = {500: "InternalError", 503: "ServiceUnavailable", 429: "TooManyRequests"}
        return cls("status", status_code, code or default.get(status_code, "Error"),
                   methods=frozenset(methods) if methods else None)

    @classmethod
    def delay(cls, seconds: float, methods: set[str] | None = None) -> Fault:
        return cls("delay", 503, "SlowDown", seconds, frozenset(methods) if methods else None)

    @classmethod
    def body(cls, status_code: int, payload: str, methods: set[str] | None = None) -> Fault:
        return cls("body", status_code, methods=frozenset(methods) if methods else None,
                   payload=payload.encode())

    @classmethod
    def reset(cls, methods: set[str] | None = None) -> Fault:
        return cls("reset", methods=frozenset(methods) if methods else None)


class FaultProxy:
    """Start with :meth:`start` (or as a context manager); stop with :meth:`stop`."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 80
        self._fault: Fault | None = None
        self._remaining: int | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.requests: list[tuple[str, str]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FaultProxy:
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def set_fault(self, fault: Fault | None, times: int | None = None) -> None:
        with self._lock:
            self._fault, self._remaining = fault, times

    def clear(self) -> None:
        self.set_fault(None)

    def _take_fault(self, method: str) -> Fault | None:
        with self._lock:
            if self._fault is None or (self._fault.methods is not None and method not in self._fault.methods):
                return None
            fault = self._fault
            if self._remaining is not None:
                self._remaining -= 1
                if self._remaining <= 0:
                    self._fault, self._remaining = None, None
            return fault

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
                pass

            def _body(self) -> bytes:
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _handle(self) -> None:
                body = self._body()
                proxy.requests.append((self.command, self.path))
                fault = proxy._take_fault(self.command)
                try:
                    if fault is None:
                        self._forward(body)
                    elif fault.kind == "reset":
                        self.connection.shutdown(socket.SHUT_RDWR)
                        self.close_connection = True
                    else:
                        if fault.kind == "delay":
                            proxy._stopping.wait(fault.seconds)
                        self._error(fault.status_code, fault.code, fault.payload or None)
                except (BrokenPipeError, ConnectionResetError, OSError):
                    self.close_connection = True  # the client gave up first: expected for delays

            def _error(self, status: int, code: str, payload: bytes | None = None) -> None:
                xml = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
                       f"<Message>injected by fault proxy</Message><RequestId>fault</RequestId></Error>")
                data = payload if payload is not None else xml.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _forward(self, body: bytes) -> None:
                conn = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=30)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                    conn.request(self.command, self.path, body=body or None, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    self.send_response(resp.status, resp.reason)
                    for k, v in resp.getheaders():
                        if k.lower() not in _HOP_BY_HOP and k.lower() != "content-length":
                            self.send_header(k, v)
                    # HEAD: keep the upstream's length (of the object it did not send)
                    length = resp.getheader("Content-Length", "0") if self.command == "HEAD" else len(data)
                    self.send_header("Content-Length", str(length))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle  # noqa: N815

        return Handler
