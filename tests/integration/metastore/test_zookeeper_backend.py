"""What only the ZooKeeper backend has: chroot, digest auth, losing the server, multi-reads."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kazoo import exceptions as kx
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState
from kazoo.security import make_digest_acl

from metastore import ABSENT, MetadataStoreError, MetadataStoreUnavailable, open_store
from metastore.retry import read_retry
from metastore.zookeeper import batch_reads as zookeeper_batch_reads
from metastore.zookeeper import connection as zookeeper_connection
from metastore.zookeeper.multiread import (
    FIRST_OPS,
    JUTE_MAXBUFFER,
    MAX_OPS,
    REPLY_BUDGET,
    ChunkSizer,
    MultiListChildren,
    MultiRead,
    MultiReadError,
    reply_bytes,
)
from metastore.zookeeper.store import ZooKeeperMetadataStore
from tests.support.harness import ZooKeeperServer, free_port, wait_until


def test_chroot_is_created_and_isolates(zookeeper: ZooKeeperServer, zk_url: str) -> None:
    with open_store(zk_url) as store:
        store.put("/managed-ledgers/t/ns/persistent/x", b"1", ABSENT)
    chroot = zk_url.split("/", 3)[3]
    raw = KazooClient(zookeeper.hosts)
    raw.start(5)
    try:
        assert raw.exists(f"/{chroot}/managed-ledgers/t/ns/persistent/x")
        assert not raw.exists("/managed-ledgers/t/ns/persistent/x")
    finally:
        raw.stop()
        raw.close()


@pytest.mark.parametrize("form", ["zk:{hosts}/{chroot}", "{hosts}/{chroot}",
                                  "metadata-store:zk:{hosts}/{chroot}/ledgers"])
def test_pulsars_url_forms_open_the_same_chroot(zookeeper: ZooKeeperServer, zk_url: str, form: str) -> None:
    """``metadataStoreUrl`` (``zk:``), a bare host list, and ``bookkeeperMetadataServiceUri``
    (``metadata-store:`` … ``/ledgers``) reach the nodes a ``zk://`` URL of the same chroot wrote."""
    with open_store(zk_url) as store:
        store.put("/managed-ledgers/t/ns/persistent/x", b"written through zk://", ABSENT)
    chroot = zk_url.split("/", 3)[3]
    with open_store(form.format(hosts=zookeeper.hosts, chroot=chroot)) as store:
        node = store.get("/managed-ledgers/t/ns/persistent/x")
    assert node is not None and node.data == b"written through zk://"


def test_digest_auth_from_file(zookeeper: ZooKeeperServer, zk_url: str, tmp_path: Path) -> None:
    chroot = "/" + zk_url.split("/", 3)[3]
    raw = KazooClient(zookeeper.hosts)
    raw.start(5)
    raw.add_auth("digest", "pulsar:pw")
    raw.create(f"{chroot}/secret", b"s3cr3t", acl=[make_digest_acl("pulsar", "pw", all=True)], makepath=True)
    raw.stop()
    raw.close()

    secret = tmp_path / "digest"
    secret.write_text("pulsar:pw\n")
    with open_store(zk_url, digest_file=secret) as store:
        assert store.get("/secret").data == b"s3cr3t"  # type: ignore[union-attr]
    with open_store(zk_url) as anonymous, pytest.raises(MetadataStoreError, match="digest credentials"):
        anonymous.get("/secret")


def test_bad_digest_file_is_one_clear_error(zk_url: str, tmp_path: Path) -> None:
    with pytest.raises(MetadataStoreError, match="cannot read ZooKeeper digest file"):
        open_store(zk_url, digest_file=tmp_path / "missing")
    bad = tmp_path / "bad"
    bad.write_text("no-colon")
    with pytest.raises(MetadataStoreError, match="user:password"):
        open_store(zk_url, digest_file=bad)


def test_unreachable_zookeeper(tmp_path: Path) -> None:
    with pytest.raises(MetadataStoreUnavailable, match=r"cannot connect to ZooKeeper at 127\.0\.0\.1:\d+ within 1s"):
        open_store(f"zk://127.0.0.1:{free_port()}", connect_timeout_s=1)


def test_server_loss_is_transient_and_recovers(tmp_path: Path) -> None:
    # A private ZooKeeper: this test stops it, the session-wide one stays up.
    server = ZooKeeperServer(tmp_path / "zk").start()
    try:
        store = open_store(server.url, connect_timeout_s=5)
        store.put("/x", b"1", ABSENT)
        server.stop()
        with pytest.raises(MetadataStoreUnavailable):
            store.put("/x", b"2", 0)
        server.start()  # same port, same data dir

        read: list[bytes | None] = []

        def read_back() -> bool:
            try:
                node = store.get("/x")
            except MetadataStoreUnavailable:
                return False  # not reconnected yet
            read.append(node.data if node is not None else None)
            return True

        wait_until(read_back, 60, "the store reconnects to the restarted server", interval=0.1)
        assert read == [b"1"]  # the failed write was not applied
        store.put("/x", b"2", 0)
        store.close()
    finally:
        server.stop()


class DroppedRequests:
    """Fault injection, in-process: stands in for one of kazoo's ``*_async`` calls and fails the
    first ``fail_first`` requests with ``ConnectionLoss``, as during a brief reconnect; then passes
    them on to the real call.  ``calls`` counts every attempt the store made."""

    def __init__(self, real: Callable[..., Any], fail_first: int) -> None:
        self.real = real
        self.fail_first = fail_first
        self.calls = 0

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        if self.calls <= self.fail_first:
            raise kx.ConnectionLoss("injected fault: connection dropped")
        return self.real(*args)


@pytest.mark.parametrize(("read", "kazoo_call", "expected"), [
    ("get", "get_async", b"1"),
    ("children", "get_children_async", ["x"]),
])
def test_a_read_is_tried_once_and_retried_only_by_the_caller(
        zk_url: str, monkeypatch: pytest.MonkeyPatch, read: str, kazoo_call: str, expected: object) -> None:
    """One retry layer: the store fails fast (it used to try 3 times, under callers' 3 tries = 9);
    the caller's tenacity policy rides out the same brief outage."""
    with open_store(zk_url) as store:
        assert isinstance(store, ZooKeeperMetadataStore)
        store.put("/retry/x", b"1", ABSENT)
        path = "/retry/x" if read == "get" else "/retry"
        fault = DroppedRequests(getattr(store._client, kazoo_call), fail_first=2)
        monkeypatch.setattr(store._client, kazoo_call, fault)

        with pytest.raises(MetadataStoreUnavailable, match=f"while accessing {path}: ConnectionLoss"):
            getattr(store, read)(path)
        assert fault.calls == 1

        fault.calls = 0
        result = read_retry()(getattr(store, read), path)
        assert (result.data if read == "get" else result) == expected
        assert fault.calls == 3  # two dropped, the third answered

        fault.calls, fault.fail_first = 0, 10
        with pytest.raises(MetadataStoreUnavailable):
            read_retry()(getattr(store, read), path)
        assert fault.calls == 3  # the caller's policy gives up after its own three tries


# ---- get_many by multi-read (OpCode 22) and its fallback


def _zk_store(zk_url: str, digest_file: Path | None = None) -> ZooKeeperMetadataStore:
    store = open_store(zk_url, digest_file=digest_file)
    assert isinstance(store, ZooKeeperMetadataStore)
    return store


def _raw_client(zookeeper: ZooKeeperServer, digest: str | None = None) -> KazooClient:
    raw = KazooClient(zookeeper.hosts)
    raw.start(5)
    if digest:
        raw.add_auth("digest", digest)
    return raw


class SentMultiReads:
    """Passes every request on to kazoo's real ``_call`` and records each multi-read's (server) paths."""

    def __init__(self, store: ZooKeeperMetadataStore) -> None:
        self.real = store._client._call
        self.sent: list[tuple[str, ...]] = []

    def __call__(self, request: Any, async_object: Any) -> Any:
        if isinstance(request, MultiRead):
            self.sent.append(request.paths)
        return self.real(request, async_object)


def test_multi_read_answers_as_single_reads(zookeeper: ZooKeeperServer, zk_url: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Present, absent, empty, null and binary nodes, the chroot's root: the same as one get each,
    keyed by our paths, in one multi-read that carries the chroot (a same-named node outside it
    must not be what is read)."""
    chroot = "/" + zk_url.split("/", 3)[3]
    raw = _raw_client(zookeeper)
    try:
        raw.create("/mr/a", b"outside the chroot", makepath=True)
        raw.create(f"{chroot}/mr/null", None, makepath=True)  # null data, as a Java client may write
    finally:
        raw.stop()
        raw.close()
    with _zk_store(zk_url) as store:
        store.put("/mr/a", b"alpha", ABSENT)
        store.put("/mr/empty", b"", ABSENT)
        store.put("/mr/deep/x/y", bytes(range(256)) * 4, ABSENT)
        paths = ["/mr/a", "/mr/missing", "/mr/empty", "/mr/null", "/mr/deep/x/y", "/nope/deeper", "/", "/mr"]
        expected = {p: store.get(p) for p in paths}
        spy = SentMultiReads(store)
        monkeypatch.setattr(store._client, "_call", spy)

        got = store.get_many(paths)

        assert got == expected and list(got) == paths
        assert got["/mr/a"].data == b"alpha"  # type: ignore[union-attr]
        assert got["/mr/missing"] is None and got["/nope/deeper"] is None
        assert got["/mr/empty"].data == got["/mr/null"].data == b""  # type: ignore[union-attr]
        assert spy.sent == [tuple(chroot + p if p != "/" else chroot for p in paths)]
        assert store.batch_reads.multi_read is True
        assert store.get_many([]) == {}


def test_multi_read_of_large_nodes_keeps_replies_within_the_budget(zk_url: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Nodes of 200 kB: once the store has seen them, each reply is planned under half a
    jute.maxbuffer; a node of 1,000,000 bytes (a 1 MiB frame's worth) is read alone."""
    with _zk_store(zk_url) as store:
        sizes = {f"/big/{i:02d}": 200_000 for i in range(12)}
        sizes["/big/huge"] = 1_000_000
        for path, size in sizes.items():
            store.put(path, path.encode().ljust(size, b"."), ABSENT)
        mid = [p for p in sizes if p != "/big/huge"]
        expected = {p: store.get(p) for p in [*sizes, "/big/absent"]}
        assert store.get_many(mid) == {p: expected[p] for p in mid}  # the first reply teaches the sizes

        spy = SentMultiReads(store)
        monkeypatch.setattr(store._client, "_call", spy)
        assert store.get_many(mid) == {p: expected[p] for p in mid}
        assert store.get_many(["/big/huge", "/big/absent"]) == {p: expected[p] for p in ("/big/huge", "/big/absent")}

        chroot = "/" + zk_url.split("/", 3)[3]
        replies = [reply_bytes([sizes.get(p.removeprefix(chroot), 0) for p in chunk]) for chunk in spy.sent]
        assert len(spy.sent) == 7  # six chunks of two 200 kB nodes, then the huge one with the absent one
        assert all(r <= REPLY_BUDGET for r in replies[:6]), replies
        assert replies[6] <= JUTE_MAXBUFFER, replies


def test_multi_read_of_a_node_we_may_not_read_fails_as_before(zookeeper: ZooKeeperServer, zk_url: str,
                                                              tmp_path: Path) -> None:
    """A NoAuth op fails alone inside the multi-read, and the batch raises what the pipelined reads
    raised: a MetadataStoreError naming the node, not a transient one, so the orphan inventory
    (``read_nodes``) reads that chunk node by node and makes the node an error row."""
    chroot = "/" + zk_url.split("/", 3)[3]
    raw = _raw_client(zookeeper, digest="pulsar:pw")
    try:
        raw.create(f"{chroot}/acl/secret", b"s3cr3t", acl=[make_digest_acl("pulsar", "pw", all=True)],
                   makepath=True)
        raw.create(f"{chroot}/acl/open", b"open")
    finally:
        raw.stop()
        raw.close()
    paths = ["/acl/open", "/acl/secret", "/acl/missing"]
    with _zk_store(zk_url) as anonymous:
        with pytest.raises(MetadataStoreError, match=r"refused access to /acl/secret: check the digest") as e:
            anonymous.get_many(paths)
        assert not isinstance(e.value, MetadataStoreUnavailable)
        assert anonymous.batch_reads.multi_read is True
        with pytest.raises(MetadataStoreError) as before:
            anonymous.batch_reads.get_pipelined(paths)
        assert str(before.value) == str(e.value)

    secret = tmp_path / "digest"
    secret.write_text("pulsar:pw\n")
    with _zk_store(zk_url, digest_file=secret) as store:
        got = store.get_many(paths)
        assert got["/acl/secret"].data == b"s3cr3t" and got["/acl/missing"] is None  # type: ignore[union-attr]


class OldServerOpcode(MultiRead):
    """Fault injection: a multi-read under an opcode ZooKeeper 3.8 does not know.  The real server
    then does exactly what a 3.5 server does with opcode 22 — answers UNIMPLEMENTED and closes
    the connection — so the store meets a server without multi-reads."""

    type = 99  # type: ignore[misc]


def test_server_without_multi_read_falls_back_once_and_remembers(zk_url: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zookeeper_batch_reads, "MultiRead", OldServerOpcode)
    with _zk_store(zk_url) as store:
        for i in range(5):
            store.put(f"/old/{i}", f"v{i}".encode(), ABSENT)
        paths = [f"/old/{i}" for i in range(5)] + ["/old/missing"]
        expected = {p: store.get(p) for p in paths}
        spy = SentMultiReads(store)
        monkeypatch.setattr(store._client, "_call", spy)

        assert store.get_many(paths) == expected  # refused, connection back, pipelined: one call
        assert store.batch_reads.multi_read is False and len(spy.sent) == 1
        assert store.get_many(paths) == expected  # not asked again
        assert len(spy.sent) == 1


def test_refusal_that_keeps_the_connection_falls_back_too(zk_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fault injection, in-process: a multi-read answered UNIMPLEMENTED on a connection that stays up
    (no ZooKeeper does this; a proxy might).  The store waits only DROP_GRACE_S for a drop."""
    monkeypatch.setattr(zookeeper_connection, "DROP_GRACE_S", 0.1)
    with _zk_store(zk_url) as store:
        store.put("/kept/a", b"a", ABSENT)
        real = store._client._call

        def refuse(request: Any, async_object: Any) -> Any:
            if isinstance(request, MultiRead):
                async_object.set_exception(kx.UnimplementedError())
                return None
            return real(request, async_object)

        monkeypatch.setattr(store._client, "_call", refuse)
        assert store.get_many(["/kept/a", "/kept/b"]) == {"/kept/a": store.get("/kept/a"), "/kept/b": None}
        assert store.batch_reads.multi_read is False


def test_multi_read_is_tried_once_and_retried_only_by_the_caller(zk_url: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Fault injection, in-process: the first multi-reads are answered ConnectionLoss, as during a
    brief reconnect.  The store reports it once; the caller's policy rides it out."""
    with _zk_store(zk_url) as store:
        store.put("/once/a", b"a", ABSENT)
        assert store.get_many(["/once/a"])["/once/a"] is not None  # multi-read known to work
        real = store._client._call
        dropped = {"left": 1, "calls": 0}

        def drop(request: Any, async_object: Any) -> Any:
            if isinstance(request, MultiRead):
                dropped["calls"] += 1
                if dropped["left"] > 0:
                    dropped["left"] -= 1
                    async_object.set_exception(kx.ConnectionLoss("injected fault: connection dropped"))
                    return None
            return real(request, async_object)

        monkeypatch.setattr(store._client, "_call", drop)
        with pytest.raises(MetadataStoreUnavailable, match="while accessing /once/a: ConnectionLoss"):
            store.get_many(["/once/a"])
        assert dropped["calls"] == 1
        dropped["left"] = 1
        assert read_retry()(store.get_many, ["/once/a"])["/once/a"].data == b"a"  # type: ignore[union-attr]
        assert dropped["calls"] == 3
        assert store.batch_reads.multi_read is True  # a lost connection says nothing about multi-read support


def test_get_many_when_not_connected(zk_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with _zk_store(zk_url) as store:
        monkeypatch.setattr(store._client, "state", KazooState.SUSPENDED)
        with pytest.raises(MetadataStoreUnavailable, match="not connected"):
            store.get_many(["/x"])
        with pytest.raises(ValueError, match="invalid metadata path"):
            store.get_many(["/x", "relative"])


# ---- the multi-read format and chunk sizing, without a server


def test_chunk_sizer_learns_node_sizes() -> None:
    stat = (0,) * 11
    sizer = ChunkSizer()
    assert sizer.ops == FIRST_OPS
    small = [(b"x" * 300, stat)] * 10
    grown = []
    for _ in range(5):
        sizer.observe(small)
        grown.append(sizer.ops)
    assert grown == [FIRST_OPS * 4, FIRST_OPS * 16, MAX_OPS, MAX_OPS, MAX_OPS]  # slow start, then the cap
    sizer.observe([(b"x" * 200_000, stat), kx.NoNodeError()])  # mean 100 kB
    assert sizer.ops == 5 and reply_bytes([100_000] * 5) <= REPLY_BUDGET
    sizer.observe([(b"x" * 1_000_000, stat)])
    assert sizer.ops == 1
    sizer.observe([])
    assert sizer.ops == 1
    sizer.observe([kx.NoNodeError()] * 3)  # absent nodes cost headers only
    assert sizer.ops == 4


def test_chunk_sizer_bounds_the_request_by_path_length() -> None:
    sizer = ChunkSizer()
    sizer.ops = MAX_OPS
    long_paths = ["/" + "p" * 60_000 + str(i) for i in range(20)]
    ends = [sizer.end_of_chunk(long_paths, 0), sizer.end_of_chunk(long_paths, 15)]
    assert ends == [8, 20]  # 8 × 60 kB fills half a jute.maxbuffer; the tail is what is left
    assert sizer.end_of_chunk(["/" + "p" * 600_000], 0) == 1  # never an empty chunk
    assert sizer.end_of_chunk([f"/n/{i}" for i in range(5000)], 1000) == 2000


def _reply(*ops: bytes) -> bytes:
    return b"".join(ops) + struct.pack("!iBi", -1, 1, -1)


def test_multi_read_wire_format() -> None:
    request = MultiRead(["/a", "/bé"])
    assert request.serialize() == (
        struct.pack("!iBi", 4, 0, -1) + struct.pack("!i", 2) + b"/a" + b"\x00"
        + struct.pack("!iBi", 4, 0, -1) + struct.pack("!i", 4) + "/bé".encode() + b"\x00"
        + struct.pack("!iBi", -1, 1, -1))
    stat = struct.pack("!qqqqiiiqiiq", 1, 2, 1234, 5, 7, 0, 0, 0, 3, 0, 9)
    reply = _reply(struct.pack("!iBii", 4, 0, 0, 3) + b"abc" + stat,
                   struct.pack("!iBii", -1, 0, -101, -101))
    data_result, error = request.deserialize(b"HDR" + reply, 3)
    assert data_result[0] == b"abc" and data_result[1].version == 7 and data_result[1].ctime == 1234
    assert isinstance(error, kx.NoNodeError)
    null = _reply(struct.pack("!iBii", 4, 0, 0, -1) + stat)
    assert MultiRead(["/n"]).deserialize(null, 0)[0][0] == b""
    with pytest.raises(MultiReadError, match="1 results for 2 paths"):
        request.deserialize(null, 0)
    with pytest.raises(MultiReadError, match="truncated"):
        request.deserialize(reply[:20], 0)
    with pytest.raises(MultiReadError, match="type 8"):
        request.deserialize(_reply(struct.pack("!iBi", 8, 0, 0)), 0)


class SentListings(SentMultiReads):
    def __call__(self, request: Any, async_object: Any) -> Any:
        if isinstance(request, MultiListChildren):
            self.sent.append(request.paths)
        return self.real(request, async_object)


def test_children_many_lists_by_multi_read_inside_the_chroot(zookeeper: ZooKeeperServer, zk_url: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Listings of 450 nodes go out as a few multi-reads carrying the chroot, and answer as
    ``children`` does (a same-named node outside the chroot is not what is listed)."""
    chroot = "/" + zk_url.split("/", 3)[3]
    raw = _raw_client(zookeeper)
    try:
        raw.create("/ls/n0/outside", b"", makepath=True)
    finally:
        raw.stop()
        raw.close()
    with _zk_store(zk_url) as store:
        for i in range(450):
            store.put(f"/ls/n{i}/c{i % 3}", b"", ABSENT)
        store.get_many(["/ls"])
        paths = [f"/ls/n{i}" for i in range(450)] + ["/ls/missing"]
        spy = SentListings(store)
        monkeypatch.setattr(store._client, "_call", spy)
        listed = store.children_many(paths)
        monkeypatch.undo()
        assert listed == {p: store.children(p) for p in paths}
        assert listed["/ls/n0"] == ["c0"]
        assert len(spy.sent) == 3 and all(p.startswith(chroot + "/ls/") for sent in spy.sent for p in sent)
