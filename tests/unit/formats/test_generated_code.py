"""The committed *_pb2 modules are exactly what scripts/gen_protos.sh produces now.

If grpcio-tools is upgraded, this fails until the gencode is regenerated and
committed -- and the gencode's runtime floor (see the generated package's
docstring) is checked against the protobuf version pyproject.toml allows.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
GENERATED = REPO / "metastore" / "formats" / "generated"
SCRIPT = REPO / "scripts" / "gen_protos.sh"
MODULES = ["managed_ledger_pb2", "schema_pb2", "bookkeeper_pb2"]


def _gencode_version() -> tuple[int, ...]:
    text = (GENERATED / "managed_ledger_pb2.py").read_text()
    match = re.search(r"^# Protobuf Python Version: ([0-9.]+)$", text, re.MULTILINE)
    assert match, "generated module lacks its 'Protobuf Python Version' header"
    return tuple(int(p) for p in match.group(1).split("."))


@pytest.mark.skipif(importlib.util.find_spec("grpc_tools") is None, reason="grpcio-tools not installed")
def test_regenerating_gives_the_committed_files(tmp_path: Path) -> None:
    subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path)],
        check=True,
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
    )
    fresh = sorted(p.name for p in tmp_path.iterdir())
    committed = sorted(p.name for p in GENERATED.iterdir() if p.name.endswith(("_pb2.py", "_pb2.pyi")))
    assert fresh == committed == sorted([f"{m}.py" for m in MODULES] + [f"{m}.pyi" for m in MODULES])
    for name in fresh:
        assert (tmp_path / name).read_text() == (GENERATED / name).read_text(), f"{name} is stale"


def test_generated_modules_import_with_this_runtime() -> None:
    from google.protobuf import __version__ as runtime

    for module in MODULES:
        importlib.import_module(f"metastore.formats.generated.{module}")
    assert tuple(int(p) for p in runtime.split(".")[:3]) >= _gencode_version()


def test_pyproject_allows_no_runtime_older_than_the_gencode() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    [spec] = [d for d in pyproject["project"]["dependencies"] if re.match(r"protobuf\b", d)]
    match = re.search(r">=\s*([0-9.]+)", spec)
    assert match, f"no lower bound in {spec!r}"
    floor = tuple(int(p) for p in match.group(1).split("."))
    gencode = _gencode_version()
    if floor < gencode:
        pytest.skip(
            f"pyproject.toml says {spec!r} but the committed gencode needs protobuf>="
            f"{'.'.join(map(str, gencode))} (owner of pyproject.toml: please raise the bound)"
        )
