"""What a tenant wrote (a topic, a subscription, a reason, a last error, a log line) prints as it is:
rich markup in it neither fails the command (``x[/]``) nor styles or hides the rest (``[conceal]``)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from rich.table import Table

from deletion_service.cli import ui
from deletion_service.cli.commands.status import undelivered_line

HOSTILE = ["x[/]", "[bold green]ALL CLEAR - nothing held[/][conceal]hidden", "[link=http://evil]click[/link]"]


@pytest.mark.parametrize("terminal", [True, False])
def test_a_table_prints_hostile_cells_and_titles_as_they_are(terminal: bool) -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=terminal, width=200, color_system=None)
    table = Table(title=f"title {HOSTILE[0]}")
    table.add_column("value")
    for text in HOSTILE:
        table.add_row(text)
    table.add_row(ui.styled("ours", "red"))
    ui.show_table(table, console=console)
    shown = out.getvalue()
    for text in HOSTILE:
        assert text in shown, shown
    assert f"title {HOSTILE[0]}" in shown and "ours" in shown


def test_a_line_with_a_tenants_topic_prints_as_it_is() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=400, color_system=None)
    ui.say(console, undelivered_line({"known": True, "count": 2, "quietSeconds": {HOSTILE[1]: 40},
                                      "byTopic": {HOSTILE[1]: 2}, "remedy": HOSTILE[0]}))
    assert HOSTILE[1] in out.getvalue() and HOSTILE[0] in out.getvalue()
