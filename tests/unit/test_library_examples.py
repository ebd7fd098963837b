"""The library surface in ``docs/library.md`` keeps working: every Python example there runs as shown.

The page lists what other code may import (``metastore.open_store``, ``offloaders``, ``deletion_service.cursor``,
the request model, ``ClusterWriter``); an example that no longer runs means a name moved or changed under a
caller.  Each runs with ``/tmp/ld`` (the page's "any empty directory") standing for a fresh one of its own.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "library.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
SURFACE = ("metastore", "offloaders", "deletion_service.cursor", "deletion_service.protocol.request",
           "ClusterWriter")


def test_the_page_shows_every_part_of_the_surface() -> None:
    shown = "\n".join(EXAMPLES)
    assert [name for name in SURFACE if name not in shown] == []


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"example-{i}" for i in range(len(EXAMPLES))])
def test_the_example_runs_as_shown(example: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code = example.replace("/tmp/ld", str(tmp_path))
    exec(compile(code, str(PAGE), "exec"), {"__name__": "example"})  # noqa: S102 - the docs' own code
