"""Where BookKeeper keeps a ledger's znode, per ledger-manager layout.

A wrong path is dangerous here: the deleter treats "node absent" as "already
deleted", so guessing the layout would silently leave orphans.  We therefore
read ``<root>/LAYOUT`` and refuse every layout but the two hierarchical ones.

``LAYOUT`` (BookKeeper's ``LedgerLayout#serialize``) is text::

    <layout format version>\\n<manager factory class or short name>:<manager version>

format version 1 or 2, e.g. ``2\\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1``.

Paths (``StringUtils`` in BookKeeper): the hierarchical manager uses the legacy
``%010d`` split 2-4-4 (``/ledgers/00/0000/L0042``) for ids below 2**31-1 and
the long ``%019d`` split 3-4-4-4-4 (``/ledgers/000/0000/0021/4748/L3647``)
from there on; the long-hierarchical manager uses the long form for every id.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from enum import StrEnum
from typing import Any, Protocol

from metastore.interface import NoNodeError

from .errors import FormatError

MAX_LEDGER_ID = 2**63 - 1
#: Below this id the hierarchical manager uses the short (legacy) form.
SHORT_FORM_LIMIT = 2**31 - 1
DEFAULT_ROOT = "/ledgers"

#: Children of the ledgers root that are BookKeeper's own bookkeeping, never ledgers.
RESERVED_NAMES = frozenset(
    {"idgen", "idgen-long", "available", "cookies", "LAYOUT", "INSTANCEID", "underreplication"}
)

_SHORT = re.compile(r"([0-9]{2})/([0-9]{4})/L([0-9]{4})")
_LONG = re.compile(r"([0-9]{3})/([0-9]{4})/([0-9]{4})/([0-9]{4})/L([0-9]{4})")
_BK_PACKAGE = "org.apache.bookkeeper.meta."
_MANAGER_VERSION = 1  # CUR_VERSION of both hierarchical factories


class LedgerLayout(StrEnum):
    """The ledger-manager layouts we can compute paths for."""

    HIERARCHICAL = "hierarchical"
    LONG_HIERARCHICAL = "longhierarchical"


_FACTORIES = {
    "HierarchicalLedgerManagerFactory": LedgerLayout.HIERARCHICAL,
    "LongHierarchicalLedgerManagerFactory": LedgerLayout.LONG_HIERARCHICAL,
    "hierarchical": LedgerLayout.HIERARCHICAL,
    "longhierarchical": LedgerLayout.LONG_HIERARCHICAL,
}


class ChildLister(Protocol):
    """The one store method the scanner needs (see ``MetadataStore.children``)."""

    def children(self, path: str) -> list[str]: ...


class NodeReader(Protocol):
    """The one store method :func:`read_layout` needs (``get`` -> node with ``.data``, or None)."""

    def get(self, path: str) -> Any: ...


def parse_layout(data: bytes) -> LedgerLayout:
    """Parse a ``LAYOUT`` node; refuse anything but the hierarchical managers."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(f"LAYOUT node is not UTF-8 text ({exc})") from exc
    lines = text.strip().split("\n")
    if not re.fullmatch(r"[0-9]+", lines[0].strip()) or int(lines[0]) not in (1, 2):
        raise FormatError(f"LAYOUT node: unsupported layout format version {lines[0]!r} (expected 1 or 2)")
    if len(lines) < 2 or lines[1].count(":") != 1:
        raise FormatError(f"LAYOUT node: no '<manager>:<version>' line in {text!r}")
    manager, version = (part.strip() for part in lines[1].split(":"))
    name = manager.removeprefix(_BK_PACKAGE)
    layout = _FACTORIES.get(name)
    if layout is None:
        raise FormatError(
            f"LAYOUT node: ledger manager {manager!r} is not supported (only Hierarchical"
            "LedgerManagerFactory and LongHierarchicalLedgerManagerFactory); refusing to guess ledger paths"
        )
    if version != str(_MANAGER_VERSION):
        raise FormatError(f"LAYOUT node: {manager} version {version!r} is not supported (expected 1)")
    return layout


def read_layout(store: NodeReader, root: str = DEFAULT_ROOT) -> LedgerLayout:
    """Read and parse ``<root>/LAYOUT`` from a store with ``get(path) -> Node | None``."""
    node = store.get(_join(root, "LAYOUT"))
    if node is None:
        raise FormatError(f"no LAYOUT node under {root!r}: is this the BookKeeper ledgers root?")
    return parse_layout(node.data)


def _join(root: str, rel: str) -> str:
    return root.rstrip("/") + "/" + rel


def _check_id(ledger_id: int) -> None:
    if not 0 <= ledger_id <= MAX_LEDGER_ID:
        raise ValueError(f"ledger id {ledger_id} outside 0..2**63-1")


def _uses_short_form(ledger_id: int, layout: LedgerLayout) -> bool:
    return LedgerLayout(layout) is LedgerLayout.HIERARCHICAL and ledger_id < SHORT_FORM_LIMIT


def ledger_path(root: str, ledger_id: int, layout: LedgerLayout | str) -> str:
    """The znode path of ``ledger_id`` under ``root`` for ``layout``."""
    _check_id(ledger_id)
    if _uses_short_form(ledger_id, LedgerLayout(layout)):
        d = f"{ledger_id:010d}"
        return _join(root, f"{d[0:2]}/{d[2:6]}/L{d[6:10]}")
    d = f"{ledger_id:019d}"
    return _join(root, f"{d[0:3]}/{d[3:7]}/{d[7:11]}/{d[11:15]}/L{d[15:19]}")


def ledger_id_from_path(root: str, path: str, layout: LedgerLayout | str) -> int:
    """Inverse of :func:`ledger_path`; ``ValueError`` for anything it would not produce."""
    prefix = root.rstrip("/") + "/"
    if not path.startswith(prefix):
        raise FormatError(f"{path!r} is not under the ledgers root {root!r}")
    rel = path[len(prefix) :]
    match = _SHORT.fullmatch(rel) or _LONG.fullmatch(rel)
    if match is None:
        raise FormatError(
            f"{path!r} is not a ledger path (expected xx/xxxx/Lxxxx or xxx/xxxx/xxxx/xxxx/Lxxxx)"
        )
    ledger_id = int("".join(match.groups()))
    if ledger_id > MAX_LEDGER_ID or ledger_path(root, ledger_id, layout) != path:
        raise FormatError(f"{path!r} is not where the {LedgerLayout(layout).value} layout keeps a ledger")
    return ledger_id


def _numbered(store: ChildLister, path: str, digits: int, leaf: bool) -> list[str]:
    """Children named by ``digits`` decimal digits (``L`` + digits for leaves), sorted = numeric order."""
    try:
        names = store.children(path)
    except NoNodeError:
        return []  # removed while we walked: nothing under it any more
    pattern = re.compile(rf"{'L' if leaf else ''}[0-9]{{{digits}}}")
    return sorted(n for n in names if pattern.fullmatch(n))


def iter_ledger_ids(store: ChildLister, root: str, layout: LedgerLayout | str) -> Iterator[int]:
    """Every ledger id under ``root``, ascending; skips BookKeeper's own nodes and stray names."""
    layout = LedgerLayout(layout)
    top = [n for n in store.children(root) if n not in RESERVED_NAMES]
    forms = [(2, 1)] if layout is LedgerLayout.HIERARCHICAL else []
    forms.append((3, 3))  # (digits of the first level, 4-digit directory levels below it)
    for first_digits, levels in forms:
        pattern = re.compile(rf"[0-9]{{{first_digits}}}")
        for first in sorted(n for n in top if pattern.fullmatch(n)):
            yield from _walk(store, root, first, levels, layout)


def _walk(store: ChildLister, root: str, rel: str, levels: int, layout: LedgerLayout) -> Iterator[int]:
    base = _join(root, rel)
    if levels == 0:
        for leaf in _numbered(store, base, 4, leaf=True):
            path = f"{base}/{leaf}"
            try:
                yield ledger_id_from_path(root, path, layout)
            except ValueError:
                continue  # e.g. a long-form id small enough for the short form: not a ledger here
        return
    for child in _numbered(store, base, 4, leaf=False):
        yield from _walk(store, root, f"{rel}/{child}", levels - 1, layout)
