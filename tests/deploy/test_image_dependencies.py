"""The image (no Docker engine here: the Dockerfile, constraints and pyproject are read).

A plain ``docker run`` of the daemon image starts (its default command asks for no token); the
daemon's environment carries neither pyspark nor matplotlib (the ``scan`` extra, the spark
stage's only); every dependency of both is pinned by ``deploy/constraints.txt``.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from tests.support.dockerfile_stages import dockerfile_stages

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / "deploy" / "constraints.txt"


def _name(requirement: str) -> str:
    found = re.match(r"[A-Za-z0-9_.\-]+", requirement)
    assert found is not None
    return found.group(0).lower().replace("_", "-")


def test_the_default_command_starts_without_a_token() -> None:
    cmd = dict(dockerfile_stages()["daemon"][1:])["CMD"]
    assert cmd.startswith('["run"') and "0.0.0.0" not in cmd, cmd  # loopback: no admin token needed


def test_the_daemon_environment_has_no_scan_dependencies() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_name(r) for r in project["dependencies"]}
    assert {"pyspark", "matplotlib"} & core == set()
    assert {"pyspark", "matplotlib"} <= {_name(r) for r in project["optional-dependencies"]["scan"]}
    build = " ".join(rest for word, rest in dockerfile_stages()["build"] if word == "RUN")
    daemon_install = re.search(r"/opt/ledger-deletion/bin/pip install (.*?) &&", build)
    assert daemon_install is not None and "[scan]" not in daemon_install.group(1)
    assert '/opt/ledger-deletion-scan/bin/pip install -c deploy/constraints.txt ".[scan]"' in build
    base_copies = [rest for word, rest in dockerfile_stages()["base"] if word == "COPY"]
    assert base_copies == ["--from=build /opt/ledger-deletion /opt/ledger-deletion"]
    assert ("COPY", "--from=build /opt/ledger-deletion-scan /opt/ledger-deletion-scan") in dockerfile_stages()["spark"]


def test_every_dependency_of_the_image_is_pinned() -> None:
    pins = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"not pinned: {line}"
            pins[_name(name)] = version
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_name(r) for r in project["dependencies"] + project["optional-dependencies"]["scan"]}
    assert wanted - set(pins) == set(), "direct dependencies without a pin"
    for word, rest in dockerfile_stages()["build"]:
        if word == "RUN" and "pip install" in rest:
            assert rest.count("pip install -c deploy/constraints.txt") == rest.count("pip install")
