"""The broker client's credentials, configured with the keys Pulsar's brokers use for their own client.

``brokerClientAuthenticationPlugin`` names Pulsar's Java class (or the short name pulsar-client knows),
``brokerClientAuthenticationParameters`` its parameters in Pulsar's text form; pulsar-client's own
classes do the work (token, TLS client certificates, OAuth2 client credentials).  pulsar-client accepts
any plugin name and only warns when it cannot load it, so an unknown name is refused here instead:
a daemon that connects without the credentials it was given is worse than one that does not start.

``brokerAuthTokenFile`` (this project's older key) is a token plugin with ``file:`` parameters; giving
both it and a plugin is refused, since which one was meant cannot be known.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from deletion_service.errors import UserError

TOKEN, TLS, OAUTH2 = "token", "tls", "oauth2"

#: Plugin names as Pulsar's configuration writes them (Java classes) and as pulsar-client knows them.
PLUGINS: dict[str, str] = {
    "org.apache.pulsar.client.impl.auth.AuthenticationToken": TOKEN, "token": TOKEN,
    "org.apache.pulsar.client.impl.auth.AuthenticationTls": TLS, "tls": TLS,
    "org.apache.pulsar.client.impl.auth.oauth2.AuthenticationOAuth2": OAUTH2, "oauth2": OAUTH2,
}


@dataclass(frozen=True)
class BrokerCredentials:
    """What the broker client authenticates with: a kind of :data:`PLUGINS` and its parameters, in the
    text form pulsar-client takes (never logged: it may hold a token)."""

    kind: str
    parameters: str

    def __repr__(self) -> str:  # the parameters may be a token
        return f"BrokerCredentials(kind={self.kind!r}, parameters=<hidden>)"

    def tls_files(self) -> tuple[str, str] | None:
        """(certificate file, key file) an HTTP client presents; None for other kinds."""
        if self.kind != TLS:
            return None
        fields = _fields(self.parameters)
        return fields["tlsCertFile"], fields["tlsKeyFile"]

    def bearer_token(self) -> str | None:
        """The token an HTTP client sends as ``Authorization: Bearer``; None for other kinds."""
        if self.kind != TOKEN:
            return None
        if self.parameters.startswith("file:"):
            return _read(Path(self.parameters.removeprefix("file://").removeprefix("file:")), "token file").strip()
        return self.parameters.removeprefix("token:").strip()


def broker_credentials(plugin: str | None, parameters: str | None, token_file: Path | None) -> BrokerCredentials | None:
    """The credentials the settings name, checked now (files readable, parameters well formed), or None."""
    if plugin and token_file is not None:
        raise UserError("both brokerAuthTokenFile and brokerClientAuthenticationPlugin are set: keep one "
                        "(a token file is brokerClientAuthenticationPlugin=token with parameters file:///path)")
    if token_file is not None:
        return _token(f"file://{token_file}")
    if not plugin:
        if parameters:
            raise UserError("brokerClientAuthenticationParameters is set but brokerClientAuthenticationPlugin is "
                            "not: name the plugin the parameters are for")
        return None
    kind = PLUGINS.get(plugin.strip())
    if kind is None:
        raise UserError(f"unsupported brokerClientAuthenticationPlugin {plugin!r}; supported: "
                        + ", ".join(name for name in PLUGINS if "." in name))
    checks = {TOKEN: _token, TLS: _tls, OAUTH2: _oauth2}
    return checks[kind](parameters or "")


def _token(parameters: str) -> BrokerCredentials:
    """``token:<jwt>``, ``file:///path`` (Pulsar's forms), or the bare token."""
    if parameters.startswith("file:"):
        path = Path(parameters.removeprefix("file://").removeprefix("file:"))
        if not _read(path, "broker token file").strip():
            raise UserError(f"broker token file {path} is empty")
        return BrokerCredentials(TOKEN, f"file://{path}")
    token = parameters.removeprefix("token:").strip()
    if not token:
        raise UserError("the token plugin needs brokerClientAuthenticationParameters: token:<jwt> or file:///path")
    return BrokerCredentials(TOKEN, f"token:{token}")


def _tls(parameters: str) -> BrokerCredentials:
    """``tlsCertFile:/path,tlsKeyFile:/path`` (Pulsar's form; ``=`` or JSON accepted too)."""
    fields = _fields(parameters)
    missing = [k for k in ("tlsCertFile", "tlsKeyFile") if not fields.get(k)]
    if missing:
        raise UserError("the TLS plugin needs brokerClientAuthenticationParameters "
                        f"tlsCertFile:/path,tlsKeyFile:/path ({' and '.join(missing)} missing)")
    for key in ("tlsCertFile", "tlsKeyFile"):
        _read(Path(fields[key]), key)
    return BrokerCredentials(TLS, f"tlsCertFile:{fields['tlsCertFile']},tlsKeyFile:{fields['tlsKeyFile']}")


def _oauth2(parameters: str) -> BrokerCredentials:
    """Pulsar's JSON (``issuerUrl``, ``privateKey``, ``audience``, optional ``scope``), passed to
    pulsar-client in its own spelling (``issuer_url``, ``private_key``)."""
    try:
        given = json.loads(parameters) if parameters.strip() else {}
    except ValueError as e:
        raise UserError(f"brokerClientAuthenticationParameters for OAuth2 is not JSON: {e}") from e
    if not isinstance(given, dict):
        raise UserError("brokerClientAuthenticationParameters for OAuth2 must be a JSON object")
    issuer = given.get("issuerUrl") or given.get("issuer_url")
    key = given.get("privateKey") or given.get("private_key")
    if not issuer or not key:
        raise UserError('the OAuth2 plugin needs brokerClientAuthenticationParameters {"issuerUrl": "https://…", '
                        '"privateKey": "file:///path/credentials.json", "audience": "…"}')
    _read(Path(str(key).removeprefix("file://").removeprefix("file:")), "OAuth2 private key file")
    ours = {"issuer_url": issuer, "private_key": key}
    for name in ("audience", "scope"):
        if given.get(name):
            ours[name] = given[name]
    return BrokerCredentials(OAUTH2, json.dumps(ours))


def _fields(parameters: str) -> dict[str, str]:
    text = parameters.strip()
    if text.startswith("{"):
        try:
            return {str(k): str(v) for k, v in json.loads(text).items()}
        except (ValueError, AttributeError) as e:
            raise UserError(f"brokerClientAuthenticationParameters is not valid JSON: {e}") from e
    pairs = (item.replace("=", ":", 1) if ":" not in item else item for item in text.split(",") if item.strip())
    return {k.strip(): v.strip() for k, _, v in (item.partition(":") for item in pairs)}


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except OSError as e:
        raise UserError(f"cannot read {what} {path}: {e.strerror}") from e
