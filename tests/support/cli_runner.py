"""Run the real ``ledger-deletion`` CLI in a subprocess, as an operator would."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str

    def assert_one_line_error(self, code: int, *fragments: str) -> str:
        """The contract for operator mistakes: one clear line on stderr, no traceback, this exit code."""
        assert self.returncode == code, (self.returncode, self.stdout, self.stderr)
        assert "Traceback" not in self.stderr and "Traceback" not in self.stdout, self.stderr
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, self.stderr
        for fragment in fragments:
            assert fragment in lines[0], (fragment, lines[0])
        return lines[0]


def run_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 120,
            input: str | None = None) -> CliResult:
    proc = subprocess.run(
        [sys.executable, "-m", "deletion_service.cli.main", *args],
        cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout, input=input,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)
