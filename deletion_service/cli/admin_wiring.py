"""Start the admin HTTP API next to the daemon, serving the deletion and cursor metrics."""

from __future__ import annotations

from collections.abc import Callable

from deletion_service.admin.app import create_app
from deletion_service.admin.deps import AdminDeps
from deletion_service.admin.server import AdminServer
from deletion_service.admin.token import load_admin_token
from deletion_service.cli.command_environment import CommandEnvironment
from deletion_service.cursor import epoch_metrics as cursor_metrics
from deletion_service.service import LedgerDeletionService


def start_admin(env: CommandEnvironment, service: LedgerDeletionService, address: str,
                liveness: Callable[[], str | None] = lambda: None) -> AdminServer:
    """Refuses a non-loopback address without a token and a port in use, with one clear error."""
    token = load_admin_token(env.config.admin_token_file)
    deps = AdminDeps.for_service(service, env.backlog, token, [cursor_metrics.REGISTRY])
    deps.liveness = liveness
    return AdminServer(create_app(deps), address, token is not None).start()
