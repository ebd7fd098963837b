"""The documentation agrees with the code and with itself.

- the generated references (configuration, CLI, the glossary's outcome mapping) are what
  ``scripts/gen_docs.py`` generates from the code now;
- every alert in ``deploy/``'s Prometheus rule files has a runbook entry in
  ``docs/operator-guide/alerts.md``;
- every relative link in ``README.md`` and ``docs/**/*.md`` points to a file that exists;
- ``README.md`` stays short (the detail lives in ``docs/``).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import yaml

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 260
#: ``[text](target)``, not an image's; the target up to a space or the closing parenthesis.
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _gen_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_docs", module)
    spec.loader.exec_module(module)
    return module


def _alert_names() -> set[str]:
    names: set[str] = set()
    for path in sorted((ROOT / "deploy").rglob("*.y*ml")):
        if path.name.endswith((".test.yml", ".test.yaml")):
            continue  # promtool's unit tests name alerts too, but define none
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(document, dict):
            continue
        for group in document.get("groups") or []:
            for rule in group.get("rules") or []:
                if "alert" in rule:
                    names.add(rule["alert"])
    return names


def _markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_the_generated_references_are_what_the_code_generates_now() -> None:
    stale = _gen_docs().stale(ROOT)
    assert not stale, (f"stale generated docs: {', '.join(map(str, stale))}; "
                       "run python scripts/gen_docs.py and commit the result")


def test_every_alert_in_deploy_has_a_runbook_entry() -> None:
    names = _alert_names()
    assert names, "no alert rules found under deploy/"
    runbook = (ROOT / "docs" / "operator-guide" / "alerts.md").read_text(encoding="utf-8")
    headings = set(re.findall(r"^#{2,4} +`?([A-Za-z0-9_]+)`?\s*$", runbook, flags=re.MULTILINE))
    missing = sorted(names - headings)
    assert not missing, f"alerts without a runbook heading in docs/operator-guide/alerts.md: {missing}"


def test_every_relative_link_in_the_docs_points_to_a_file_that_exists() -> None:
    broken = []
    for path in _markdown_files():
        text = path.read_text(encoding="utf-8")
        text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)  # code blocks hold no links
        for target in LINK.findall(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL, or an anchor in the same page
            file_part = target.split("#", 1)[0]
            if not (path.parent / file_part).exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert not broken, "links to files that do not exist:\n" + "\n".join(broken)


def test_the_readme_stays_short() -> None:
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail to docs/ (at most {README_MAX_LINES})"
