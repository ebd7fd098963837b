"""read_decoded: the one "get, refuse absent, decode, name the path" function, without a server."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from metastore.formats import FormatError, ManagedLedgerInfo, decode_managed_ledger, encode_managed_ledger
from metastore.formats.node_reader import MissingNodeError, NodeGetter, read_decoded


@dataclass(frozen=True)
class FakeNode:
    data: bytes
    version: int


class DictStore(NodeGetter[FakeNode]):
    """``get(path) -> node | None`` over a dict: all ``read_decoded`` needs of a store.  Declares
    :class:`NodeGetter`, so the type checker holds it (and ``FakeNode``, a ``StoredNode``) to that contract."""

    def __init__(self, nodes: dict[str, FakeNode]) -> None:
        self.nodes = nodes

    def get(self, path: str) -> FakeNode | None:
        return self.nodes.get(path)


def test_returns_the_decoded_value_and_the_node_as_read() -> None:
    node = FakeNode(encode_managed_ledger(ManagedLedgerInfo()), version=7)
    info, read = read_decoded(DictStore({"/ml": node}), "/ml", decode_managed_ledger, "managed-ledger")
    assert info == ManagedLedgerInfo() and read is node and read.version == 7


def test_an_absent_node_is_a_missing_node_error_naming_the_path() -> None:
    with pytest.raises(MissingNodeError, match="^no managed-ledger node at /ml$") as caught:
        read_decoded(DictStore({}), "/ml", decode_managed_ledger, "managed-ledger")
    assert (caught.value.path, caught.value.what) == ("/ml", "managed-ledger")
    assert isinstance(caught.value, FormatError)  # "nothing I can read", like a missing LAYOUT node


def test_an_undecodable_node_names_what_and_where_and_keeps_the_cause() -> None:
    expected = r"^cannot decode the managed-ledger node at /ml: .*ManagedLedgerInfo"
    with pytest.raises(FormatError, match=expected) as caught:
        read_decoded(DictStore({"/ml": FakeNode(b"\xff\xff", 0)}), "/ml", decode_managed_ledger, "managed-ledger")
    assert not isinstance(caught.value, MissingNodeError)
    assert isinstance(caught.value.__cause__, FormatError)
