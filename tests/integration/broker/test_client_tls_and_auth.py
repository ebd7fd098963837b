"""The broker client and the admin REST client configured with Pulsar's client keys, over real TLS.

pulsar-lite serves neither TLS nor authentication, so the TLS side here is a TLS server of the test's
own that requires a client certificate (Python's ``ssl``, certificates made with the ``openssl`` tool):
it records the certificate each client presented.  For the broker client the TLS handshake is the part
under test (what follows is Pulsar's protocol, which this server does not speak); the admin REST client
gets a whole answer.  The token plugin is tested against pulsar-lite, which accepts any credentials.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from deletion_service.broker.authentication import broker_credentials
from deletion_service.broker.interface import BrokerError
from deletion_service.broker.pulsar_client import PulsarBrokerClient
from deletion_service.errors import UserError
from deletion_service.inflight import AdminRestBacklog
from tests.support.harness import PulsarLiteBroker

TLS_CLASS = "org.apache.pulsar.client.impl.auth.AuthenticationTls"
TOKEN_CLASS = "org.apache.pulsar.client.impl.auth.AuthenticationToken"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate ``CN=ledger-deletion``."""
    d = tmp_path_factory.mktemp("pki")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=test-ca")
    (d / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    for name, cn in (("server", "127.0.0.1"), ("client", "ledger-deletion")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", f"/CN={cn}")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.pem", "-days", "2", *(["-extfile", "san.cnf"] if name == "server" else []))
    return d


def _server_context(pki: Path, client_cert: ssl.VerifyMode = ssl.CERT_REQUIRED) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki / "ca.pem"))
    ctx.load_cert_chain(pki / "server.pem", pki / "server.key")
    ctx.verify_mode = client_cert  # required: no client certificate, no handshake
    return ctx


def _client_cn(tls: ssl.SSLSocket) -> str:
    cert: dict = tls.getpeercert() or {}  # type: ignore[assignment] - typeshed's shape of it is looser than the stdlib's
    names = {str(key): str(value) for rdn in cert.get("subject", ()) for key, value in rdn}
    return names.get("commonName", "")


@contextlib.contextmanager
def tls_listener(pki: Path) -> Iterator[tuple[int, list[str]]]:
    """A TLS port that records the common name of each client certificate it was shown."""
    seen: list[str] = []
    sock = socket.create_server(("127.0.0.1", 0))
    sock.settimeout(0.2)
    stop = threading.Event()
    ctx = _server_context(pki)

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            with contextlib.suppress(OSError), ctx.wrap_socket(conn, server_side=True) as tls:
                seen.append(_client_cn(tls))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1], seen
    finally:
        stop.set()
        thread.join(5)
        sock.close()


def test_the_broker_client_presents_its_tls_certificate_over_pulsar_ssl(pki: Path) -> None:
    creds = broker_credentials(TLS_CLASS, f"tlsCertFile:{pki}/client.pem,tlsKeyFile:{pki}/client.key", None)
    with tls_listener(pki) as (port, seen):
        broker = PulsarBrokerClient(f"pulsar+ssl://127.0.0.1:{port}", None, pki / "ca.pem", operation_timeout_s=3,
                                    credentials=creds, long_lived=False)
        try:
            with pytest.raises(BrokerError):  # the server is no Pulsar broker: the lookup after the handshake fails
                broker.partitions("persistent://t/ns/x")
        finally:
            broker.close()
    assert "ledger-deletion" in seen, seen


@pytest.fixture
def https_admin(pki: Path) -> Iterator[tuple[str, list[str]]]:
    """An admin REST answering topic stats over HTTPS; it records each request's client certificate and
    ``Authorization`` header (a certificate is optional, as a broker that also takes tokens has it)."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            seen.append(f"cn={_client_cn(self.connection)} auth={self.headers.get('Authorization')}")  # type: ignore[arg-type]
            body = json.dumps({"subscriptions": {"ledger-deletion": {"msgBacklog": 7}}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = _server_context(pki, ssl.CERT_OPTIONAL).wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_the_admin_rest_client_presents_the_same_certificate(pki: Path, https_admin: tuple[str, list[str]]) -> None:
    url, seen = https_admin
    creds = broker_credentials(TLS_CLASS, f"tlsCertFile:{pki}/client.pem,tlsKeyFile:{pki}/client.key", None)
    backlog = AdminRestBacklog(url, credentials=creds, trust_file=pki / "ca.pem")
    assert backlog.backlog(["persistent://t/ns/x"], "ledger-deletion") == {"persistent://t/ns/x": 7}
    assert seen == ["cn=ledger-deletion auth=None"]
    untrusted = AdminRestBacklog(url, credentials=creds)  # the system's CAs do not know the test CA
    with pytest.raises(BrokerError, match="cannot reach admin REST"):
        untrusted.backlog(["persistent://t/ns/x"], "ledger-deletion")


def test_the_admin_rest_client_sends_the_token_plugins_token(pki: Path, https_admin: tuple[str, list[str]]) -> None:
    url, seen = https_admin
    token = broker_credentials(TOKEN_CLASS, "token:eyJ.abc.def", None)
    backlog = AdminRestBacklog(url, credentials=token, trust_file=pki / "ca.pem")
    assert backlog.backlog(["persistent://t/ns/x"], "ledger-deletion") == {"persistent://t/ns/x": 7}
    assert seen == ["cn= auth=Bearer eyJ.abc.def"]


def test_the_token_plugin_connects_to_a_broker(pulsar_broker: PulsarLiteBroker) -> None:
    creds = broker_credentials(TOKEN_CLASS, "token:eyJ.abc.def", None)
    broker = PulsarBrokerClient(pulsar_broker.service_url, credentials=creds, long_lived=False)
    try:
        assert broker.partitions("persistent://public/default/auth-plugin") == 0
    finally:
        broker.close()


def test_a_certificate_that_is_no_certificate_is_one_clear_error(pki: Path, tmp_path: Path) -> None:
    (tmp_path / "c.pem").write_text("not a certificate")
    creds = broker_credentials(TLS_CLASS, f"tlsCertFile:{tmp_path}/c.pem,tlsKeyFile:{pki}/client.key", None)
    with pytest.raises(UserError, match="cannot be loaded"):
        AdminRestBacklog("https://127.0.0.1:1", credentials=creds, trust_file=pki / "ca.pem")
