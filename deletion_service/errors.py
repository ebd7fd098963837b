"""Errors an operator can act on: the CLI prints their message as one line, no traceback."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_NOT_IDLE = 3


class UserError(Exception):
    """A mistake or an unmet precondition the operator can fix; the message says how."""

    exit_code = EXIT_FAILURE

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(UserError):
    exit_code = EXIT_USAGE
