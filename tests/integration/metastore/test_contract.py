"""One contract, two backends: every test runs on SQLite and on a real ZooKeeper."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

from metastore import (
    ABSENT,
    ANY,
    BadVersionError,
    CheckVersion,
    Delete,
    MetadataStore,
    MultiOpError,
    NodeDeleteOutcome,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Put,
    RequestTooLargeError,
    open_store,
    walk,
)


@pytest.fixture(params=["sqlite", "zookeeper"])
def store_url(request: pytest.FixtureRequest) -> str:
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "zk_url")


@pytest.fixture
def store(store_url: str) -> Iterator[MetadataStore]:
    s = open_store(store_url)
    yield s
    s.close()


def test_missing_node_semantics(store: MetadataStore) -> None:
    assert store.get("/nope") is None
    assert not store.exists("/nope")
    assert store.children("/nope") == []
    with pytest.raises(NoNodeError):
        store.delete("/nope", 0)
    with pytest.raises(NoNodeError):
        store.put("/nope", b"x", 3)  # CAS on a missing node is not a create


def test_create_read_and_parents(store: MetadataStore) -> None:
    before = int(time.time() * 1000) - 5000
    assert store.put("/a/b/c", b"hello", ABSENT) == 0
    node = store.get("/a/b/c")
    assert node is not None and node.data == b"hello" and node.version == 0
    assert node.ctime_ms >= before
    assert store.children("/a") == ["b"]
    assert store.get("/a/b") is not None  # parents made, as Pulsar's store does
    with pytest.raises(NodeExistsError):
        store.put("/a/b/c", b"again", ABSENT)


def test_cas_conflicts(store: MetadataStore) -> None:
    store.put("/n", b"0", ABSENT)
    assert store.put("/n", b"1", 0) == 1
    with pytest.raises(BadVersionError):
        store.put("/n", b"stale", 0)
    node = store.get("/n")
    assert node is not None and (node.data, node.version) == (b"1", 1)
    assert store.put("/n", b"any", ANY) == 2
    assert store.put("/fresh", b"any", ANY) == 0


def test_delete_at_version(store: MetadataStore) -> None:
    store.put("/d", b"x", ABSENT)
    store.put("/d", b"y", 0)
    with pytest.raises(BadVersionError):
        store.delete("/d", 0)
    assert store.exists("/d")
    store.delete("/d", 1)
    assert store.get("/d") is None


def test_delete_refuses_non_empty(store: MetadataStore) -> None:
    store.put("/p/child", b"", ABSENT)
    with pytest.raises(NotEmptyError):
        store.delete("/p", ANY)
    assert store.children("/p") == ["child"]


def test_children_sorted_and_walk(store: MetadataStore) -> None:
    for name in ["b", "a", "c"]:
        store.put(f"/w/{name}", b"", ABSENT)
    store.put("/w/a/x", b"", ABSENT)
    assert store.children("/w") == ["a", "b", "c"]
    assert list(walk(store, "/w")) == ["/w/a", "/w/a/x", "/w/b", "/w/c"]


def test_multi_applies_all(store: MetadataStore) -> None:
    store.put("/m/cursor", b"c", ABSENT)
    store.put("/m/ledger", b"l0", ABSENT)
    store.put("/m/old", b"o", ABSENT)
    versions = store.multi([
        CheckVersion("/m/cursor", 0), Put("/m/ledger", b"l1", 0), Delete("/m/old", 0), Put("/m/new", b"n", ABSENT),
    ])
    assert versions == [None, 1, None, 0]
    assert store.get("/m/ledger").data == b"l1"  # type: ignore[union-attr]
    assert store.get("/m/old") is None
    assert store.get("/m/new").data == b"n"  # type: ignore[union-attr]


@pytest.mark.parametrize("failing_step", ["check", "put", "delete", "create"])
def test_multi_rolls_back_everything(store: MetadataStore, failing_step: str) -> None:
    store.put("/r/cursor", b"c", ABSENT)
    store.put("/r/cursor", b"c2", 0)  # now at version 1
    store.put("/r/ledger", b"l0", ABSENT)
    store.put("/r/victim", b"v", ABSENT)
    bad = {
        "check": CheckVersion("/r/cursor", 0),
        "put": Put("/r/ledger", b"zzz", 7),
        "delete": Delete("/r/missing", 0),
        "create": Put("/r/cursor", b"dup", ABSENT),
    }[failing_step]
    ops = [Put("/r/ledger", b"l1", 0), Delete("/r/victim", 0), Put("/r/brand-new", b"n", ABSENT), bad]
    with pytest.raises(MultiOpError) as info:
        store.multi(ops)
    assert info.value.index == 3
    expected_cause = {"check": BadVersionError, "put": BadVersionError, "delete": NoNodeError,
                      "create": NodeExistsError}[failing_step]
    assert isinstance(info.value.cause, expected_cause)
    # Nothing of the batch happened.
    assert store.get("/r/ledger").data == b"l0"  # type: ignore[union-attr]
    assert store.get("/r/victim") is not None
    assert store.get("/r/brand-new") is None


def test_size_guard_refuses_before_sending(store: MetadataStore) -> None:
    big = b"x" * (1024 * 1024 + 1)
    with pytest.raises(RequestTooLargeError, match="jute.maxbuffer"):
        store.put("/big", big, ABSENT)
    with pytest.raises(RequestTooLargeError):
        store.multi([Put("/big1", big[:600_000], ABSENT), Put("/big2", big[:600_000], ABSENT)])
    # The connection survived: nothing was sent.
    assert store.get("/big") is None and store.get("/big1") is None
    store.put("/after", b"ok", ABSENT)
    assert store.get("/after").data == b"ok"  # type: ignore[union-attr]
    # Just under the limit goes through (ZooKeeper really accepts it).
    near = b"y" * (store.max_request_bytes - 200)
    store.put("/near", near, ABSENT)
    assert store.get("/near").data == near  # type: ignore[union-attr]


def test_delete_many_batches_and_reports_each(store: MetadataStore) -> None:
    for i in range(25):
        store.put(f"/ledgers/L{i:04d}", b"m", ABSENT)
    store.put("/ledgers/L0003", b"changed", 0)  # now at version 1: must survive
    targets = [(f"/ledgers/L{i:04d}", 0) for i in range(25)] + [("/ledgers/L9999", 0)]
    outcomes = store.delete_many(targets, batch_size=7)
    assert outcomes["/ledgers/L0003"] == NodeDeleteOutcome.BAD_VERSION
    assert outcomes["/ledgers/L9999"] == NodeDeleteOutcome.ABSENT
    deleted = [p for p, o in outcomes.items() if o == NodeDeleteOutcome.DELETED]
    assert len(deleted) == 24
    assert store.children("/ledgers") == ["L0003"]


def test_delete_many_splits_by_request_size(store: MetadataStore) -> None:
    store.max_request_bytes = 2_000  # as if the server limit were tiny
    paths = [f"/s/{'n' * 80}{i:03d}" for i in range(60)]
    for p in paths:
        store.put(p, b"", ABSENT)
    outcomes = store.delete_many([(p, 0) for p in paths], batch_size=1000)
    assert set(outcomes.values()) == {NodeDeleteOutcome.DELETED}
    assert store.children("/s") == []


def test_get_many(store: MetadataStore) -> None:
    store.put("/g/a", b"1", ABSENT)
    store.put("/g/b", b"2", ABSENT)
    got = store.get_many(["/g/a", "/g/b", "/g/c"])
    assert got["/g/a"].data == b"1" and got["/g/b"].data == b"2"  # type: ignore[union-attr]
    assert got["/g/c"] is None


@pytest.mark.parametrize("path", ["relative", "/trailing/", "/a//b", "/a/../b"])
def test_invalid_paths_rejected(store: MetadataStore, path: str) -> None:
    with pytest.raises(ValueError, match="invalid metadata path"):
        store.get(path)


_WRITER = textwrap.dedent("""
    import sys
    from metastore import open_store, BadVersionError, ABSENT, NodeExistsError
    url, rounds = sys.argv[1], int(sys.argv[2])
    store = open_store(url)
    try:
        store.put("/counter", b"0", ABSENT)
    except NodeExistsError:
        pass
    done = conflicts = 0
    while done < rounds:
        node = store.get("/counter")
        try:
            store.put("/counter", str(int(node.data) + 1).encode(), node.version)
            done += 1
        except BadVersionError:
            conflicts += 1
    print(conflicts)
    store.close()
""")


def test_concurrent_writers_from_two_processes(store_url: str, store: MetadataStore) -> None:
    rounds = 150
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, store_url, str(rounds)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err
    node = store.get("/counter")
    assert node is not None
    # Every increment survived: CAS lost none, whatever the interleaving.
    assert int(node.data) == 2 * rounds
    assert node.version == 2 * rounds


def test_children_many(store: MetadataStore) -> None:
    """The same answer as one ``children`` each: sorted names, ``[]`` for an absent node."""
    for path in ("/cm/a/x", "/cm/a/y", "/cm/b/z", "/cm/leaf"):
        store.put(path, b"", ABSENT)
    store.get_many(["/cm/a"])  # on ZooKeeper, the first multi-read tells the store it has them
    paths = ["/cm/a", "/cm/b", "/cm/leaf", "/cm/missing", "/cm"]
    assert store.children_many(paths) == {p: store.children(p) for p in paths}
    assert store.children_many(paths)["/cm/a"] == ["x", "y"]
