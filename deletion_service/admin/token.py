"""Where the admin bearer token comes from: ``adminTokenFile`` or ``LEDGER_DELETION_ADMIN_TOKEN``.

The token guards deletions, so every way of getting it wrong fails loudly
instead of silently running without authentication: a missing, unreadable or
empty file is an error, and so is an env variable that is set but empty.
The token itself never appears in an error message.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from deletion_service.errors import UserError

TOKEN_ENV = "LEDGER_DELETION_ADMIN_TOKEN"


def load_admin_token(token_file: Path | None = None, env: Mapping[str, str] | None = None) -> str | None:
    """The configured token, or ``None`` when neither source is set (reads are open, mutations too,
    which is why a non-loopback address refuses to start without one).

    The file wins over the env variable: it is the explicit, configured source."""
    env = os.environ if env is None else env
    if token_file is not None:
        try:
            text = Path(token_file).read_text(encoding="utf-8")
        except FileNotFoundError as e:
            raise UserError(f"admin token file {token_file} does not exist (adminTokenFile)") from e
        except (OSError, UnicodeDecodeError) as e:
            why = e.strerror if isinstance(e, OSError) else "not UTF-8 text"
            raise UserError(f"cannot read admin token file {token_file}: {why}") from e
        return _checked(text.strip(), f"admin token file {token_file}")
    if TOKEN_ENV in env:
        return _checked(env[TOKEN_ENV].strip(), f"${TOKEN_ENV}")
    return None


def _checked(token: str, where: str) -> str:
    if not token:
        raise UserError(f"{where} is empty: put the admin bearer token in it, or unset it")
    # A bearer token travels in an HTTP header: visible ASCII only, or no client could ever send it.
    if not all(0x21 <= ord(c) <= 0x7E for c in token):
        raise UserError(f"{where} holds whitespace or non-ASCII characters; a bearer token must be visible ASCII")
    return token
