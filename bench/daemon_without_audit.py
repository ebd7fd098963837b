"""``ledger-deletion run`` with the audit trail off: the bench's way to show what the trail costs.

    python -m bench.daemon_without_audit run [the usual options]

The product has no switch for this (the trail is always on, DESIGN.md "Tenancy and
audit"), so only a bench may turn it off: here ``run`` builds its service without the
writer it opened (the writer is still opened and closed, and never written to), and
everything else is the CLI's own entry point.
"""

from __future__ import annotations

from typing import Any

from deletion_service.cli import main as cli_main
from deletion_service.cli.commands import run as run_command
from deletion_service.service import LedgerDeletionService


def _service_without_trail(*args: Any, **kwargs: Any) -> LedgerDeletionService:
    kwargs["audit"] = None
    return LedgerDeletionService(*args, **kwargs)


if __name__ == "__main__":
    run_command.LedgerDeletionService = _service_without_trail  # type: ignore[assignment,misc]
    cli_main.entry()
