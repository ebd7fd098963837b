"""Start the admin HTTP API for ``run`` (placeholder until the admin package lands)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class _NoAdmin:
    url: str = "(admin API not built yet)"

    def stop(self) -> None:
        pass


def start_admin(opts, env, service, address):  # noqa: ANN001, ANN201
    return _NoAdmin()
