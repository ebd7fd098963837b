"""A cursor is named as Pulsar names it: its subscription URL-encoded (``Codec.encode``, Java's
``URLEncoder.encode(s, UTF_8)``), and that one string is its node's name under the managed ledger and
the ``pulsar/cursor`` stamp on its ledgers.  The expected values are written out from the Java
semantics (space -> ``+``; ``A-Za-z0-9.-*_`` kept; every other byte of the UTF-8 form ``%XX``,
upper case), not computed by the code under test."""

from __future__ import annotations

import pytest

from deletion_service.cluster_writer import bucket_custom_metadata, pulsar_custom_metadata
from deletion_service.protocol.metadata_reading import ManagedLedgerNodes
from deletion_service.protocol.references import LedgerKind, ReferenceKind, TopicMetadata, superseded
from metastore.formats import (
    ManagedCursorInfo,
    ManagedLedgerInfo,
    Position,
    cursor_path,
    encode_cursor,
    encode_managed_ledger,
    pulsar_cursor_name,
    subscription_name,
)
from metastore.formats.custom_metadata import CURSOR_KEY
from metastore.interface import Node

TOPIC = "persistent://t/ns/orders"
ML = "/managed-ledgers/t/ns/persistent/orders"

#: (subscription, its cursor's name), from URLEncoder's rules.
JAVA = [
    ("a b", "a+b"),
    ("a+b", "a%2Bb"),
    ("a/b", "a%2Fb"),
    ("é", "%C3%A9"),
    ("a%b", "a%25b"),
    ("a*b", "a*b"),
    ("a~b", "a%7Eb"),
    ("a-b_c.d", "a-b_c.d"),
    ("sub-1", "sub-1"),
    ("订阅", "%E8%AE%A2%E9%98%85"),
]


@pytest.mark.parametrize(("subscription", "cursor"), JAVA)
def test_a_cursor_is_named_as_java_url_encodes_its_subscription(subscription: str, cursor: str) -> None:
    assert pulsar_cursor_name(subscription) == cursor
    assert subscription_name(cursor) == subscription


@pytest.mark.parametrize(("subscription", "cursor"), JAVA)
def test_the_node_and_the_stamp_are_the_same_encoded_name(subscription: str, cursor: str) -> None:
    """What a broker writes for subscription ``s``: the node ``<ml>/<encoded s>`` and, on every ledger
    of that cursor, ``pulsar/cursor=<encoded s>`` (``buildAdditionalMetadataForCursor(name)``)."""
    assert cursor_path(TOPIC, subscription) == f"{ML}/{cursor}"
    assert pulsar_custom_metadata(TOPIC, subscription)[CURSOR_KEY] == cursor


def test_a_bucket_snapshot_is_stamped_with_the_subscription_itself() -> None:
    """Upstream's bucket tracker hands its storage ``Codec.decode(cursor.getName())``."""
    assert bucket_custom_metadata(TOPIC, "a b")[CURSOR_KEY] == "a b"


def test_a_name_not_in_pulsars_encoding_reads_as_itself() -> None:
    assert subscription_name("50%") == "50%"


def _node(data: bytes) -> Node:
    return Node(data=data, version=0, ctime_ms=1, children_version=0)


def test_the_metadata_reading_keys_each_cursor_by_its_node_name_as_its_ledgers_are_stamped() -> None:
    """The scan and the leak watcher read through :class:`ManagedLedgerNodes`: cursors ``a b`` and
    ``a+b`` of one topic are the cursors ``a+b`` and ``a%2Bb``, each with its own ledger, and each
    reference names the cursor exactly as its ledger's ``pulsar/cursor`` does."""
    ml = _node(encode_managed_ledger(ManagedLedgerInfo([])))
    nodes = ManagedLedgerNodes(ML, ml, (
        ("a+b", _node(encode_cursor(ManagedCursorInfo(10, Position(1, 0))))),  # subscription "a b"
        ("a%2Bb", _node(encode_cursor(ManagedCursorInfo(30, Position(1, 0))))),  # subscription "a+b"
        ("%C3%A9", _node(encode_cursor(ManagedCursorInfo(40, Position(1, 0))))),  # subscription "é"
    ))
    meta = nodes.decoded()
    assert {name: c.cursors_ledger_id for name, c in meta.cursors.items()} == {"a+b": 10, "a%2Bb": 30, "%C3%A9": 40}
    refs = {(r.ledger_id, r.detail) for r in meta.references() if r.kind is ReferenceKind.CURSOR}
    assert refs == {(10, "a+b"), (30, "a%2Bb"), (40, "%C3%A9")}
    why = {r.ledger_id: r.why for r in meta.references()}
    assert why[10] == f"cursor ledger of subscription 'a b' of {TOPIC}"
    assert why[30] == f"cursor ledger of subscription 'a+b' of {TOPIC}"


def test_the_proof_for_a_young_cursor_ledger_reads_the_cursor_its_stamp_names() -> None:
    """``a b``'s cursor is still on ledger 10 and ``a+b``'s on 30: ledger 20, stamped ``a+b`` (``a b``'s),
    is not proven superseded (``a b`` may be about to switch to it); ledger 25, stamped ``a%2Bb``, is."""
    meta = TopicMetadata(TOPIC, ManagedLedgerInfo([]), {"a+b": ManagedCursorInfo(10, Position(1, 0)),
                                                        "a%2Bb": ManagedCursorInfo(30, Position(1, 0))})
    assert superseded(LedgerKind.CURSOR, 20, meta, cursor="a+b") is None
    assert superseded(LedgerKind.CURSOR, 25, meta, cursor="a%2Bb") == (
        "cursor 'a%2Bb' already uses newer cursor ledger 30")
