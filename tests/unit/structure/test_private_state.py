"""One object, one file: the cursor core's and the daemon's classes read only their own private state.

A ``Dispatcher(ChangesMixin)`` was once one object in two files, the mixin
reading five private attributes that only the dispatcher's ``__init__`` set.
Read from the source with ``ast`` (as ``test_package_shape`` does), two rules keep
that from coming back in these modules:

* no ``obj._name`` on anything but ``self``/``cls``: another object is used
  through its public names;
* every ``self._name`` a class reads is set, or defined, by that class (or a
  base class defined beside it): a private attribute declared but set
  elsewhere is the mixin shape.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
MODULES = sorted((ROOT / "deletion_service" / "cursor").glob("*.py")) + sorted(
    (ROOT / "deletion_service" / "daemon").glob("*.py"))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _on_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def _foreign_private_reads(tree: ast.AST) -> list[str]:
    return [f"line {n.lineno}: {ast.unparse(n)}" for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and _private(n.attr) and not _on_self(n.value)]


def _set_by(cls: ast.ClassDef) -> set[str]:
    """Private names the class body defines or assigns a value to (on itself or on ``self``)."""
    names: set[str] = set()
    for node in cls.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and (
                node.value is not None or _is_dataclass(cls)):  # a dataclass's __init__ sets every field
            names.add(node.target.id)
    for node in ast.walk(cls):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, ast.Attribute) and _on_self(t.value):
                    names.add(t.attr)
    return {n for n in names if _private(n)}


def _is_dataclass(cls: ast.ClassDef) -> bool:
    return any("dataclass" in ast.unparse(d) for d in cls.decorator_list)


def _classes() -> dict[str, ast.ClassDef]:
    return {node.name: node for path in MODULES for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.ClassDef)}


def _unset_private_reads(tree: ast.AST, classes: dict[str, ast.ClassDef]) -> list[str]:
    found = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        own = _set_by(cls)
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id in classes:
                own |= _set_by(classes[base.id])
        found += [f"{cls.name} line {n.lineno}: self.{n.attr}" for n in ast.walk(cls)
                  if isinstance(n, ast.Attribute) and _on_self(n.value) and _private(n.attr) and n.attr not in own]
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_object_reads_another_objects_private_state(path: Path) -> None:
    tree = ast.parse(path.read_text(), str(path))
    assert _foreign_private_reads(tree) == []
    assert _unset_private_reads(tree, _classes()) == []


def test_the_rules_see_the_mixin_shape_issue_28_found() -> None:
    """The checker itself, on the shape it forbids: a mixin using what another class's __init__ sets."""
    source = '''
class ChangesMixin:
    _lock: object
    def begin(self):
        with self._lock:
            self._pending = None
class Other:
    def peek(self, d):
        return d._deferred
'''
    tree = ast.parse(source)
    assert _unset_private_reads(tree, {}) == ["ChangesMixin line 5: self._lock"]
    assert _foreign_private_reads(tree) == ["line 9: d._deferred"]
