"""Tables piped are plain columns with whole values; the data dir's record of its daemon."""

from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path

from rich.console import Console
from rich.table import Table

from deletion_service.cli import ui
from deletion_service.clock_text import rfc3339
from deletion_service.embedded import daemon_record


def test_a_piped_table_is_plain_columns_and_never_shortens_a_value() -> None:
    out = io.StringIO()
    table = Table(title="held")
    table.add_column("key")
    table.add_column("value")
    table.add_row("minLedgerAgeSeconds", "ledger younger than minLedgerAgeSeconds (86400s)")
    ui.show_table(table, console=Console(file=out, width=20))  # a file: not a terminal, however narrow
    assert out.getvalue() == ("held\nkey                   value\n"
                              "minLedgerAgeSeconds   ledger younger than minLedgerAgeSeconds (86400s)\n")


def test_a_record_names_the_live_daemon_and_a_dead_ones_is_ignored(tmp_path: Path) -> None:
    written = daemon_record.write(tmp_path, "127.0.0.1", 18777, "http://127.0.0.1:18777")
    found = daemon_record.find(tmp_path)
    assert found.record == written and written.pid == os.getpid() and written.admin_address == "127.0.0.1:18777"
    gone = subprocess.Popen(["true"])
    gone.wait()
    (tmp_path / "daemon.json").write_text(json.dumps({**written.to_json(), "pid": gone.pid}))
    found = daemon_record.find(tmp_path)
    assert found.record is None and f"names pid {gone.pid}" in found.note and "ignored" in found.note
    daemon_record.remove(tmp_path)  # another process's record is left alone
    assert (tmp_path / "daemon.json").exists()


def test_a_moment_in_json_is_rfc3339_utc_with_milliseconds() -> None:
    assert rfc3339(1_795_768_321_886) == "2026-11-27T08:32:01.886Z"
