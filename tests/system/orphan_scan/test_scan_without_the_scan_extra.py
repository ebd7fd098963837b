"""``scan-orphans`` in the daemon's image (no pyspark, no matplotlib: the ``scan``
extra is the Spark image's) says so in one line and exits 2, no traceback.

The one fake: the missing packages are simulated by an import hook in the child process that refuses
them (this test venv has the extra installed, and uninstalling it would break the other tests); the
CLI itself runs unchanged, as ``python -m deletion_service.cli.main`` would.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli_runner import CliResult

WITHOUT_SCAN_EXTRA = """
import importlib.abc, runpy, sys

class NoScanExtra(importlib.abc.MetaPathFinder):
    '''As if the scan extra were not installed: its packages cannot be imported.'''
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {MISSING}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, NoScanExtra())
sys.argv = ["ledger-deletion", *sys.argv[1:]]
runpy.run_module("deletion_service.cli.main", run_name="__main__")
"""


def _run(missing: set[str], *args: str) -> CliResult:
    code = WITHOUT_SCAN_EXTRA.format(MISSING=sorted(missing))
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    return CliResult(r.returncode, r.stdout, r.stderr)


@pytest.mark.parametrize("missing", [{"pyspark", "py4j", "matplotlib"}, {"matplotlib"}])
def test_the_scan_without_its_extra_says_where_to_run_it(tmp_path: Path, missing: set[str]) -> None:
    r = _run(missing, "scan-orphans", "--data-dir", str(tmp_path / "data"))
    line = r.assert_one_line_error(2, "the orphan scan needs the scan extra", "pip install 'ledger-deletion[scan]'")
    assert "is not installed here" in line


def test_the_same_under_json_is_one_json_object(tmp_path: Path) -> None:
    r = _run({"pyspark"}, "--json", "scan-orphans", "--data-dir", str(tmp_path / "data"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "scan extra" in json.loads(r.stderr)["error"]


def test_its_help_needs_no_spark() -> None:
    r = _run({"pyspark", "py4j", "matplotlib"}, "scan-orphans", "--help")
    assert r.returncode == 0 and "--spark-master" in r.stdout, r.stderr
