"""yamllint over the deployment's YAML: the rules and their tests, the chart's values and metadata,
and what the chart renders (templates are Go templates, not YAML, so their output is linted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.helm_chart import ALL_ON, CHART, ROOT, helm

yamllint_config = pytest.importorskip("yamllint.config", reason="yamllint missing: pip install -e '.[test]'")
linter = pytest.importorskip("yamllint.linter")

# Long lines are allowed: alert annotations and help texts are one line each on purpose.
SOURCES = yamllint_config.YamlLintConfig("{extends: default, rules: {line-length: disable, document-start: disable}}")
# toYaml writes block sequences unindented under their key, the templates indent theirs: both are valid.
RENDERED = yamllint_config.YamlLintConfig(
    "{extends: default, rules: {line-length: disable, document-start: disable, "
    "indentation: {indent-sequences: whatever}}}")


def _problems(text: str, config: object) -> list[str]:
    return [f"{p.line}:{p.column} {p.message}" for p in linter.run(text, config)]


@pytest.mark.parametrize("path", [
    "deploy/prometheus/ledger-deletion-alerts.yml", "deploy/prometheus/ledger-deletion-alerts.test.yml",
    "helm/ledger-deletion/values.yaml", "helm/ledger-deletion/Chart.yaml"])
def test_sources_are_clean(path: str) -> None:
    assert _problems((ROOT / path).read_text(), SOURCES) == []


@pytest.mark.parametrize("values", [None, ALL_ON], ids=["defaults", "all_on"])
def test_rendered_manifests_are_clean(values: dict | None) -> None:
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(values, name="ld", namespace="pulsar", is_install=True)
    for name, text in sorted(rendered.items()):
        if name.endswith(".yaml") and text.strip():
            assert _problems(text, RENDERED) == [], name


def test_yamllint_finds_a_duplicate_key() -> None:
    assert any("duplication" in p for p in _problems("labels:\n  release: a\n  release: b\n", RENDERED))


def test_the_linked_rules_file_is_linted_too() -> None:
    assert (CHART / "files" / "ledger-deletion-alerts.yml").resolve() == Path(
        ROOT / "deploy/prometheus/ledger-deletion-alerts.yml").resolve()
