"""BookKeeper ledger paths and layouts; Pulsar managed-ledger/cursor/schema paths."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from metastore.formats import (
    FormatError,
    LedgerLayout,
    TopicName,
    cursor_path,
    iter_ledger_ids,
    ledger_id_from_path,
    ledger_path,
    managed_ledger_name,
    managed_ledger_path,
    namespace_ownership_prefix,
    parse_layout,
    parse_topic,
    read_layout,
    schema_id,
    schema_path,
    topic_from_managed_ledger_name,
    topic_from_managed_ledger_path,
)
from metastore.formats.pulsar_paths import url_decode, url_encode
from metastore.interface import Node, NoNodeError

MAX_ID = 2**63 - 1
H, LH = LedgerLayout.HIERARCHICAL, LedgerLayout.LONG_HIERARCHICAL


class TreeStore:
    """Just enough of MetadataStore (children, get) over a set of node paths."""

    def __init__(self, paths: list[str], data: dict[str, bytes] | None = None) -> None:
        self.kids: dict[str, set[str]] = {}
        self.data = data or {}
        for path in [*paths, *self.data]:
            parts = path.strip("/").split("/")
            for i, name in enumerate(parts):
                self.kids.setdefault("/" + "/".join(parts[:i]), set()).add(name)
                self.kids.setdefault("/" + "/".join(parts[: i + 1]), set())

    def children(self, path: str) -> list[str]:
        if path not in self.kids:
            raise NoNodeError(path)
        return sorted(self.kids[path], reverse=True)  # no order promised by stores

    def get(self, path: str) -> Node | None:
        return Node(self.data[path], 0, 0) if path in self.data else None


@pytest.mark.parametrize(
    ("ledger_id", "layout", "path"),
    [
        (0, H, "/ledgers/00/0000/L0000"),
        (42, H, "/ledgers/00/0000/L0042"),
        (123456789, H, "/ledgers/01/2345/L6789"),
        (2**31 - 2, H, "/ledgers/21/4748/L3646"),
        (2**31 - 1, H, "/ledgers/000/0000/0021/4748/L3647"),
        (2**31 + 2, H, "/ledgers/000/0000/0021/4748/L3650"),
        (MAX_ID, H, "/ledgers/922/3372/0368/5477/L5807"),
        (42, LH, "/ledgers/000/0000/0000/0000/L0042"),
        (MAX_ID, LH, "/ledgers/922/3372/0368/5477/L5807"),
    ],
)
def test_known_paths(ledger_id: int, layout: LedgerLayout, path: str) -> None:
    assert ledger_path("/ledgers", ledger_id, layout) == path
    assert ledger_id_from_path("/ledgers", path, layout) == ledger_id


def test_custom_root_and_string_layouts() -> None:
    assert ledger_path("/bk/ledgers/", 7, "hierarchical") == "/bk/ledgers/00/0000/L0007"
    assert ledger_id_from_path("/bk/ledgers", "/bk/ledgers/00/0000/L0007", "hierarchical") == 7
    assert ledger_path("/", 7, "longhierarchical") == "/000/0000/0000/0000/L0007"


@given(st.integers(0, MAX_ID), st.sampled_from([H, LH]))
def test_path_id_round_trip(ledger_id: int, layout: LedgerLayout) -> None:
    path = ledger_path("/ledgers", ledger_id, layout)
    assert ledger_id_from_path("/ledgers", path, layout) == ledger_id


@pytest.mark.parametrize(
    ("path", "layout"),
    [
        ("/ledgers/00/0000/0042", H),  # no L
        ("/ledgers/00/0000/L042", H),
        ("/ledgers/0/0000/L0042", H),
        ("/ledgers/00/0000/L0042/x", H),
        ("/ledgers/00/0000/L0042\n", H),
        ("/other/00/0000/L0042", H),
        ("/ledgers/00/0000/L0042", LH),  # short form under long-hierarchical
        ("/ledgers/000/0000/0000/0000/L0042", H),  # long form for a short id
        ("/ledgers/99/9999/L9999", H),  # short form for an id >= 2**31-1
        ("/ledgers/999/9999/9999/9999/L9999", LH),  # > 2**63-1
        ("/ledgers/idgen/ID-0000000001", H),
        ("/ledgers/٠٠/٠٠٠٠/L٠٠٤٢", H),  # non-ASCII digits
    ],
)
def test_malformed_paths_rejected(path: str, layout: LedgerLayout) -> None:
    with pytest.raises(ValueError, match="not a ledger path|not where the|not under"):
        ledger_id_from_path("/ledgers", path, layout)


@pytest.mark.parametrize("ledger_id", [-1, 2**63])
def test_out_of_range_ids(ledger_id: int) -> None:
    with pytest.raises(ValueError, match="outside"):
        ledger_path("/ledgers", ledger_id, H)


@pytest.mark.parametrize(
    ("data", "layout"),
    [
        (b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1", H),
        (b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1\n", H),
        (b"2\norg.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory:1", LH),
        (b"2\nHierarchicalLedgerManagerFactory:1", H),
        (b"1\nhierarchical:1", H),
        (b"1\nlonghierarchical:1\n", LH),
    ],
)
def test_layouts_accepted(data: bytes, layout: LedgerLayout) -> None:
    assert parse_layout(data) is layout


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            b"2\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory:1",
            "FlatLedgerManagerFactory' is not supported",
        ),
        (b"1\nflat:1", "'flat' is not supported"),
        (b"2\norg.apache.bookkeeper.meta.LegacyHierarchicalLedgerManagerFactory:1", "not supported"),
        (b"2\norg.apache.bookkeeper.meta.MSLedgerManagerFactory:1", "not supported"),
        (b"2\ncom.example.HierarchicalLedgerManagerFactory:1", "not supported"),
        (b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:2", "version '2' is not supported"),
        (b"3\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1", "layout format version '3'"),
        (b"2", "no '<manager>:<version>' line"),
        (b"2\nHierarchicalLedgerManagerFactory", "no '<manager>:<version>' line"),
        (b"", "layout format version ''"),
        (b"\xff", "not UTF-8"),
    ],
)
def test_layouts_refused(data: bytes, message: str) -> None:
    with pytest.raises(FormatError, match=re.escape(message)):
        parse_layout(data)


def test_read_layout_from_store() -> None:
    store = TreeStore(
        [], {"/ledgers/LAYOUT": b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1"}
    )
    assert read_layout(store) is H
    with pytest.raises(FormatError, match="no LAYOUT node under '/bk'"):
        read_layout(store, "/bk")


def test_scanner_hierarchical() -> None:
    ids = [0, 42, 43, 2**31 - 2, 2**31 - 1, 10**12, MAX_ID]
    noise = [
        "/ledgers/LAYOUT",
        "/ledgers/INSTANCEID",
        "/ledgers/idgen/ID-0000000044",
        "/ledgers/idgen-long/000/0000/0000/0000/ID-0000",
        "/ledgers/available/readonly/bk1:3181",
        "/ledgers/cookies/bk1:3181",
        "/ledgers/underreplication/ledgers/00/0000/L0001",
        "/ledgers/00/0000/L0042.lock",
        "/ledgers/00/0000/tmp",
        "/ledgers/00/junk/L0001",
        "/ledgers/000/0000/0000/0000/L0005",  # long form for a short id: not a ledger here
        "/ledgers/999/9999/9999/9999/L9999",  # beyond 2**63-1
        "/ledgers/1234/0000/L0001",
        "/ledgers/01/2345",  # empty directory
    ]
    store = TreeStore([ledger_path("/ledgers", i, H) for i in ids] + noise)
    assert list(iter_ledger_ids(store, "/ledgers", H)) == ids


def test_scanner_long_hierarchical_ignores_short_form() -> None:
    ids = [1, 42, MAX_ID]
    store = TreeStore([ledger_path("/ledgers", i, LH) for i in ids] + ["/ledgers/00/0000/L0007"])
    assert list(iter_ledger_ids(store, "/ledgers", LH)) == ids


def test_scanner_tolerates_nodes_vanishing_midway() -> None:
    class Vanishing(TreeStore):
        def children(self, path: str) -> list[str]:
            if path == "/ledgers/00/0000":
                raise NoNodeError(path)  # deleted between the two listings
            return super().children(path)

    store = Vanishing([ledger_path("/ledgers", i, H) for i in (1, 2**31)])
    assert list(iter_ledger_ids(store, "/ledgers", H)) == [2**31]
    with pytest.raises(NoNodeError):
        list(iter_ledger_ids(store, "/missing", H))


@given(st.sets(st.integers(0, MAX_ID), max_size=20), st.sampled_from([H, LH]))
def test_scanner_finds_exactly_what_was_created(ids: set[int], layout: LedgerLayout) -> None:
    store = TreeStore([ledger_path("/ledgers", i, layout) for i in ids] + ["/ledgers/LAYOUT"])
    assert list(iter_ledger_ids(store, "/ledgers", layout)) == sorted(ids)


# --- Pulsar paths ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "encoded"),
    [
        ("orders", "orders"),
        ("a b", "a+b"),
        ("A-z.0_9*", "A-z.0_9*"),
        ("a~b/c:d%e+f", "a%7Eb%2Fc%3Ad%25e%2Bf"),
        ("é€😀", "%C3%A9%E2%82%AC%F0%9F%98%80"),
    ],
)
def test_url_encoding_matches_java(text: str, encoded: str) -> None:
    assert url_encode(text) == encoded
    assert url_decode(encoded) == text


@given(st.text(min_size=1))
def test_url_round_trip(text: str) -> None:
    assert url_decode(url_encode(text)) == text


def test_managed_ledger_and_cursor_paths() -> None:
    assert managed_ledger_path("persistent://t/ns/orders") == "/managed-ledgers/t/ns/persistent/orders"
    assert managed_ledger_path("t/ns/my topic") == "/managed-ledgers/t/ns/persistent/my+topic"
    assert managed_ledger_path("orders") == "/managed-ledgers/public/default/persistent/orders"
    assert managed_ledger_name("persistent://t/ns/orders-partition-2") == "t/ns/persistent/orders-partition-2"
    assert cursor_path("t/ns/orders", "my sub/ü") == "/managed-ledgers/t/ns/persistent/orders/my+sub%2F%C3%BC"
    assert namespace_ownership_prefix("persistent://t/ns/x") == "/namespace/t/ns"
    assert namespace_ownership_prefix("t/ns") == "/namespace/t/ns"


def test_schema_paths_strip_partition() -> None:
    assert schema_path("persistent://t/ns/orders-partition-12") == "/schemas/t/ns/orders"
    assert schema_path("t/ns/orders") == "/schemas/t/ns/orders"
    assert schema_id("t/ns/a b-partition-0") == "t/ns/a+b"
    assert schema_path("t/ns/x-partition-") == "/schemas/t/ns/x-partition-"  # not a partition
    assert parse_topic("t/ns/x-partition-3").partition_index == 3
    assert parse_topic("t/ns/x").partition_index is None


def test_path_to_topic() -> None:
    topic = topic_from_managed_ledger_path("/managed-ledgers/t/ns/persistent/my+topic%C3%A9")
    assert topic == TopicName("t", "ns", "my topicé")
    assert str(topic) == "persistent://t/ns/my topicé"
    assert topic_from_managed_ledger_name("t/ns/persistent/orders") == parse_topic("persistent://t/ns/orders")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("non-persistent://t/ns/x", "only persistent topics"),
        ("persistent://t/c/ns/x", "V1 topic names"),
        ("persistent://t/x", "expected persistent://"),
        ("persistent://t/ns/", "empty topic local name"),
        ("persistent:///ns/x", "invalid tenant"),
        ("persistent://t/n s/x", "invalid namespace"),
        ("t/ns/a/b", "V1 topic names"),
    ],
)
def test_bad_topic_names(name: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_topic(name)


@pytest.mark.parametrize(
    "name",
    [
        "t/ns/persistent",
        "t/ns/non-persistent/x",
        "t/ns/persistent/a/b",
        "t/ns/persistent/a%2",
        "t/ns/persistent/a%FF",
        "t/ns/persistent/a%7e",  # lower-case hex: Java never writes it
        "t/ns/persistent/a~b",  # Java would encode '~'
        "t/ns/persistent/a%2Fb",  # a '/' in a V2 local name
    ],
)
def test_bad_managed_ledger_names(name: str) -> None:
    with pytest.raises(ValueError):
        topic_from_managed_ledger_name(name)
    with pytest.raises(ValueError, match="not under"):
        topic_from_managed_ledger_path("/schemas/" + name)


LOCAL = st.text(st.characters(blacklist_characters="/", blacklist_categories=("Cs",)), min_size=1).filter(
    lambda s: s not in (".", "..")
)


@given(
    st.from_regex(r"[a-z0-9_=:.-]{1,8}", fullmatch=True).filter(lambda s: s not in (".", "..")),
    st.from_regex(r"[a-z0-9_-]{1,8}", fullmatch=True),
    LOCAL,
)
def test_topic_path_round_trip(tenant: str, namespace: str, local: str) -> None:
    topic = TopicName(tenant, namespace, local)
    assert topic_from_managed_ledger_path(managed_ledger_path(topic)) == topic
    assert parse_topic(str(topic)) == topic


@pytest.mark.parametrize("name", ["persistent://./ns/x", "persistent://t/../x", "persistent://t/ns/..",
                                  "persistent://t/ns/.", "persistent://t/ns/a\ud800b"])
def test_names_that_address_no_node_are_refused(name: str) -> None:
    """'.'/'..' segments name another node (or none) and a lone surrogate has no UTF-8 path:
    such a name is invalid at parse time, not an error deep inside a metadata read."""
    with pytest.raises(ValueError):
        parse_topic(name)
