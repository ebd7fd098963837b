"""Read one node and decode it, naming the path in every failure: written once, used by every command.

Why it exists: the mark phase, cursor persistence and cursor reset each read a
node, refused a missing one, decoded it and re-raised a decoding failure with
the path — three copies whose messages had already begun to differ.  Here the
two ways it can fail are two errors, both :class:`FormatError` (an absent node
is, to a caller who asked for its content, a node it cannot read — as a
missing ``LAYOUT`` node is in :func:`~metastore.formats.ledger_paths.read_layout`);
callers that must tell them apart catch :class:`MissingNodeError` first.

The store is a protocol (``get(path) -> node | None``), so this package stays
importable without the store interface, as the rest of ``formats`` is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from .errors import FormatError

T = TypeVar("T")


class StoredNode(Protocol):
    """What the reader needs of a node: its bytes (``metastore.Node`` is one)."""

    @property
    def data(self) -> bytes: ...


N = TypeVar("N", bound=StoredNode)
N_co = TypeVar("N_co", bound=StoredNode, covariant=True)


class NodeGetter(Protocol[N_co]):
    """The one store method :func:`read_decoded` needs (``MetadataStore.get``)."""

    def get(self, path: str) -> N_co | None: ...


class MissingNodeError(FormatError):
    """The node to decode does not exist; ``path`` and ``what`` say which, for callers that rephrase."""

    def __init__(self, path: str, what: str) -> None:
        super().__init__(f"no {what} node at {path}")
        self.path = path
        self.what = what


def read_decoded(store: NodeGetter[N], path: str, decode: Callable[[bytes], T], what: str) -> tuple[T, N]:
    """Read ``path`` and decode it with ``decode``; the decoded value and the node as read.

    The node comes back too because its version is what a later compare-and-set
    checks.  :class:`MissingNodeError` when the node is absent; a
    :class:`FormatError` naming ``what`` and ``path`` when it cannot be
    decoded.  Store errors (e.g. the store being unavailable) pass through
    untouched: retrying them is the caller's decision.
    """
    node = store.get(path)
    if node is None:
        raise MissingNodeError(path, what)
    try:
        return decode(node.data), node
    except FormatError as e:
        raise FormatError(f"cannot decode the {what} node at {path}: {e}") from e
