"""The package's shape, checked from its source: imports flow one way, functions stay readable.

These read the code with ``ast`` instead of importing it, so an import hidden inside a
function counts exactly like one at the top of a module — that is where cycles hide.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("metastore", "offloaders", "deletion_service")
MAX_FUNCTION_LINES = 80


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imported(module: str, path: Path) -> Iterator[str]:
    """Every package module ``module`` imports, at any depth of its code."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([base] if base else []))
            # ``from pkg import mod`` imports the module pkg.mod; ``from pkg import name`` imports pkg
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in MODULES:  # ``import a.b.c`` of a name inside a.b
                name = name.rpartition(".")[0]
            if name and name != module:
                yield name


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _graph() -> dict[str, set[str]]:
    return {module: set(_imported(module, path)) for module, path in MODULES.items()}


def test_the_checker_sees_a_cycle_hidden_in_a_function() -> None:
    """The detector itself: a cycle closed by a function-level import is found."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    source = "def f():\n    from deletion_service.cli import options\n"
    tree_imports = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom)]
    assert tree_imports, "ast.walk reaches imports inside functions"


def test_no_import_cycles() -> None:
    cycles = _cycles(_graph())
    assert not cycles, "import cycles (counting imports inside functions): " + "; ".join(
        " ↔ ".join(c) for c in cycles)


@pytest.mark.parametrize("lower,upper", [("metastore", "deletion_service"), ("offloaders", "deletion_service"),
                                         ("metastore", "offloaders")])
def test_lower_layers_never_import_upper_ones(lower: str, upper: str) -> None:
    graph = _graph()
    wrong = sorted(f"{m} → {t}" for m, targets in graph.items() if m.split(".")[0] == lower
                   for t in targets if t.split(".")[0] == upper)
    assert not wrong


def test_cli_modules_import_in_one_direction() -> None:
    """options → settings → connections → command_environment → commands → main."""
    order = ["options", "settings", "connections", "command_environment", "commands", "main"]
    graph = _graph()

    def rank(module: str) -> int | None:
        parts = module.split(".")
        if parts[:2] != ["deletion_service", "cli"] or len(parts) < 3:
            return None
        return order.index(parts[2]) if parts[2] in order else None

    backwards = sorted(f"{m} → {t}" for m, targets in graph.items() for t in targets
                       if rank(m) is not None and rank(t) is not None and rank(t) > rank(m))  # type: ignore[operator]
    assert not backwards


def test_no_function_longer_than_a_reader_can_hold() -> None:
    long = []
    for module, path in MODULES.items():
        if "generated" in path.parts:  # protoc's output
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long.append(f"{module}.{node.name}: {length} lines")
    assert not long


#: Declared but not imported yet, and why — each entry names the work that removes it.
NOT_IMPORTED_YET: dict[str, str] = {}


def _third_party_imports() -> set[str]:
    tops = set()
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                tops |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                tops.add(node.module.split(".")[0])
    return {t for t in tops if t not in PACKAGES and t not in sys.stdlib_module_names and t != "__future__"}


def _normal(dist: str) -> str:
    """PEP 503: ``prometheus_client`` and ``prometheus-client`` are one distribution."""
    return re.sub(r"[-_.]+", "-", dist).lower()


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = project["dependencies"] + project["optional-dependencies"]["scan"]  # scan: scan-orphans' extra
    return {_normal(re.split(r"[<>=!~\[; ]", dep, maxsplit=1)[0]) for dep in runtime}


def test_dependencies_are_honest() -> None:
    """Every import the package makes is declared, and every declared dependency is imported."""
    owners = importlib.metadata.packages_distributions()
    imported = _third_party_imports()
    undeclared = sorted(t for t in imported if not {_normal(d) for d in owners.get(t, [t])} & _declared())
    assert not undeclared, "imported but not declared in pyproject.toml"
    dists_imported = {_normal(d) for t in imported for d in owners.get(t, [t])}
    unused = sorted(_declared() - dists_imported - set(NOT_IMPORTED_YET))
    assert not unused, "declared in pyproject.toml but never imported"


def test_the_readme_layout_table_names_every_directory() -> None:
    """A new package or top-level directory without a row leaves the next engineer guessing.

    A directory counts as named when the table names its path, or its parent's row names it
    (``formats/`` in the ``metastore/`` row) or an ancestor's row does; a package's row may be spelt ``pkg/*.py``."""
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Layout"):].split("\n## ", 1)[0]
    rows = {m.group(1).removesuffix("*.py"): m.group(2)
            for m in re.finditer(r"^\| `([^`]+)` \|(.*)$", table, flags=re.M)}
    dirs = {p.relative_to(ROOT) for package in PACKAGES for p in [ROOT / package, *(ROOT / package).rglob("*")]
            if p.is_dir() and (p / "__init__.py").exists()}
    dirs |= {p.relative_to(ROOT) for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")
             and p.name not in ("build", "dist", "ledger-deletion-data") and not p.name.endswith(".egg-info")}
    unnamed = sorted(str(d) for d in dirs if f"{d}/" not in rows
                     and not any(f"`{d.name}/`" in rows.get(f"{parent}/", "") for parent in d.parents))
    assert unnamed == []


def _constructs(path: Path, names: set[str]) -> list[str]:
    """Where ``path`` calls a constructor in ``names`` (``Action(...)``, ``decision.Action(...)``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in names:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}(...)")
    return found


def test_every_verdict_is_chosen_in_the_decision_table() -> None:
    """``decision.py`` promises that every delete-phase decision lives there: no other module builds an
    :class:`Action` (the worker once chose cross-namespace → DLQ, lane full → reconsume and a placeholder
    ``"undecided"`` itself).  They call the table's functions instead."""
    home = ROOT / "deletion_service" / "delete_phase" / "rules" / "decision.py"
    outside = [hit for path in MODULES.values() if path != home for hit in _constructs(path, {"Action"})]
    assert outside == []


#: Modules that talk to storage, a broker or another process: the rules may reach none of them.
IO_MODULES = ("deletion_service.delete_phase.storage", "deletion_service.delete_phase.consumer",
              "deletion_service.delete_phase.offload", "deletion_service.delete_phase.process",
              "deletion_service.broker.pulsar_client", "deletion_service.broker.publisher",
              "metastore.zookeeper", "metastore.sqlite_store",
              "metastore.factory", "offloaders.s3", "offloaders.filesystem", "offloaders.registry")
IO_LIBRARIES = ("kazoo", "boto3", "botocore", "pulsar", "sqlite3", "socket", "subprocess", "urllib.request",
                "http.client", "requests", "pyspark", "uvicorn", "fastapi", "multiprocessing", "threading")


def _reach(start: str, graph: dict[str, set[str]]) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for child in graph[todo.pop()] - seen:
            seen.add(child)
            todo.append(child)
    return seen


def _libraries(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return {name for name in found if any(name == lib or name.startswith(f"{lib}.") for lib in IO_LIBRARIES)}


def test_the_rules_reach_no_io_module() -> None:
    """``delete_phase/rules`` decides and never does I/O, at any depth of what it imports: that is what
    lets every row of its tables be tested without servers, and keeps a decision from waiting on one."""
    graph = _graph()
    rules = [m for m in MODULES if m.startswith("deletion_service.delete_phase.rules")]
    assert rules, "the rules package exists"
    bad = {}
    for module in rules:
        reached = _reach(module, graph) | {module}
        io = sorted(r for r in reached if r.startswith(IO_MODULES))
        libraries = sorted(set().union(*(_libraries(MODULES[r]) for r in reached)))
        if io or libraries:
            bad[module] = io + libraries
    assert bad == {}


def test_metrics_import_nothing_from_the_delete_phase() -> None:
    """The metrics name a request's fate (``protocol/fate.py``), never how the delete phase decides it:
    a change of the delete phase must not ripple into what Prometheus scrapes."""
    reached = _reach("deletion_service.metrics", _graph())
    assert sorted(r for r in reached if r.startswith("deletion_service.delete_phase")) == []


def test_every_package_says_what_lives_there() -> None:
    """Each package's ``__init__.py`` opens with a paragraph saying what the package holds."""
    silent = []
    for package in PACKAGES:
        for init in sorted((ROOT / package).rglob("__init__.py")):
            if "generated" in init.parts:
                continue
            doc = ast.get_docstring(ast.parse(init.read_text())) or ""
            if len(doc.split()) < 8:
                silent.append(str(init.relative_to(ROOT)))
    assert silent == []


MAX_CLASS_LINES = 250
MAX_CLASS_METHODS = 20


def test_no_class_is_over_250_lines_or_20_methods() -> None:
    """A class a reader can hold: at most 250 lines and 20 methods (every ``def`` in its body, dunder and
    private included).  A bigger one holds several concepts; split it into collaborators, one a module."""
    too_big = []
    for path in MODULES.values():
        if "generated" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ClassDef):
                continue
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            methods = sum(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) for n in node.body)
            if lines > MAX_CLASS_LINES or methods > MAX_CLASS_METHODS:
                too_big.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {lines} lines, {methods} methods")
    assert too_big == []
