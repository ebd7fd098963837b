"""The broker client's credentials from Pulsar's keys: each plugin form accepted, every mistake refused
before a connection is made (pulsar-client itself only warns on a plugin it cannot load)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deletion_service.broker.authentication import OAUTH2, TLS, TOKEN, BrokerCredentials, broker_credentials
from deletion_service.errors import UserError

TOKEN_CLASS = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
TLS_CLASS = "org.apache.pulsar.client.impl.auth.AuthenticationTls"
OAUTH2_CLASS = "org.apache.pulsar.client.impl.auth.oauth2.AuthenticationOAuth2"


@pytest.mark.parametrize("plugin", [TOKEN_CLASS, "token"])
def test_a_token_inline_or_in_a_file(plugin: str, tmp_path: Path) -> None:
    inline = broker_credentials(plugin, "token:eyJ.abc.def", None)
    assert inline == BrokerCredentials(TOKEN, "token:eyJ.abc.def") and inline.bearer_token() == "eyJ.abc.def"
    assert inline.tls_files() is None
    (tmp_path / "t").write_text("eyJ.from.file\n")
    in_file = broker_credentials(plugin, f"file://{tmp_path / 't'}", None)
    assert in_file is not None and in_file.kind == TOKEN and in_file.bearer_token() == "eyJ.from.file"
    assert "eyJ" not in repr(inline)  # never printed


def test_the_older_token_file_key_is_the_token_plugin(tmp_path: Path) -> None:
    (tmp_path / "t").write_text("eyJ.x.y")
    creds = broker_credentials(None, None, tmp_path / "t")
    assert creds is not None and creds.kind == TOKEN and creds.bearer_token() == "eyJ.x.y"
    with pytest.raises(UserError, match="both brokerAuthTokenFile and brokerClientAuthenticationPlugin"):
        broker_credentials(TOKEN_CLASS, "token:a", tmp_path / "t")


def test_tls_client_certificates(tmp_path: Path) -> None:
    (tmp_path / "c.pem").write_text("cert")
    (tmp_path / "k.pem").write_text("key")
    for params in (f"tlsCertFile:{tmp_path}/c.pem,tlsKeyFile:{tmp_path}/k.pem",
                   json.dumps({"tlsCertFile": f"{tmp_path}/c.pem", "tlsKeyFile": f"{tmp_path}/k.pem"})):
        creds = broker_credentials(TLS_CLASS, params, None)
        assert creds == BrokerCredentials(TLS, f"tlsCertFile:{tmp_path}/c.pem,tlsKeyFile:{tmp_path}/k.pem")
        assert creds.bearer_token() is None
        assert creds.tls_files() == (f"{tmp_path}/c.pem", f"{tmp_path}/k.pem")
    with pytest.raises(UserError, match="tlsKeyFile missing"):
        broker_credentials(TLS_CLASS, f"tlsCertFile:{tmp_path}/c.pem", None)
    with pytest.raises(UserError, match="cannot read tlsKeyFile"):
        broker_credentials(TLS_CLASS, f"tlsCertFile:{tmp_path}/c.pem,tlsKeyFile:{tmp_path}/none.pem", None)


def test_oauth2_client_credentials_in_pulsars_json(tmp_path: Path) -> None:
    (tmp_path / "creds.json").write_text('{"client_id": "a", "client_secret": "b"}')
    params = json.dumps({"issuerUrl": "https://auth.example", "privateKey": f"file://{tmp_path}/creds.json",
                         "audience": "urn:pulsar"})
    creds = broker_credentials(OAUTH2_CLASS, params, None)
    assert creds is not None and creds.kind == OAUTH2
    assert json.loads(creds.parameters) == {"issuer_url": "https://auth.example",
                                            "private_key": f"file://{tmp_path}/creds.json", "audience": "urn:pulsar"}
    with pytest.raises(UserError, match="needs brokerClientAuthenticationParameters"):
        broker_credentials(OAUTH2_CLASS, '{"audience": "x"}', None)
    with pytest.raises(UserError, match="cannot read OAuth2 private key file"):
        broker_credentials(OAUTH2_CLASS, json.dumps({"issuerUrl": "https://a", "privateKey": "/none.json"}), None)


@pytest.mark.parametrize("plugin,params,fragment", [
    ("org.apache.pulsar.client.impl.auth.AuthenticationSasl", "x", "unsupported brokerClientAuthenticationPlugin"),
    (None, "token:abc", "brokerClientAuthenticationParameters is set but brokerClientAuthenticationPlugin is not"),
    (TOKEN_CLASS, "", "the token plugin needs"),
    (TOKEN_CLASS, "file:///nonexistent/token", "cannot read broker token file"),
])
def test_mistakes_are_refused_before_connecting(plugin: str | None, params: str, fragment: str) -> None:
    with pytest.raises(UserError, match=fragment):
        broker_credentials(plugin, params, None)


def test_no_credentials_is_none() -> None:
    assert broker_credentials(None, None, None) is None
