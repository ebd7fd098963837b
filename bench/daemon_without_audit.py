"""``ledger-deletion run`` with the audit trail off: the bench's way to show what the trail costs.

    python -m bench.daemon_without_audit run [the usual options]

The product has no switch for this (the trail is always on, DESIGN.md "Tenancy and
audit"), so only a bench may turn it off: here ``run``'s ``daemon_writer`` is replaced
by one that returns no writer, and everything else is the CLI's own entry point.
"""

from __future__ import annotations

from deletion_service.cli import main as cli_main
from deletion_service.cli.commands import run as run_command


def _no_writer(*_args: object, **_kwargs: object) -> None:
    return None


if __name__ == "__main__":
    run_command.daemon_writer = _no_writer  # type: ignore[assignment]
    cli_main.entry()
