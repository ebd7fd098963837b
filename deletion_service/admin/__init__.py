"""The daemon's admin HTTP API: ``create_app`` (FastAPI), ``AdminServer`` (uvicorn in a thread)."""

from deletion_service.admin.app import create_app
from deletion_service.admin.deps import AdminDeps, DependencyProbe
from deletion_service.admin.server import AdminServer
from deletion_service.admin.token import load_admin_token

__all__ = ["AdminDeps", "AdminServer", "DependencyProbe", "create_app", "load_admin_token"]
