"""What only the ZooKeeper backend has: chroot, digest auth, losing the server."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kazoo import exceptions as kx
from kazoo.client import KazooClient
from kazoo.security import make_digest_acl

from metastore import ABSENT, MetadataStoreError, MetadataStoreUnavailable, open_store
from metastore.retry import read_retry
from metastore.zookeeper_store import ZooKeeperMetadataStore
from tests.harness import ZooKeeperServer, free_port


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
        for _ in range(100):
            try:
                node = store.get("/x")
                break
            except MetadataStoreUnavailable:
                import time

                time.sleep(0.1)
        assert node is not None and node.data == b"1"  # the failed write was not applied
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
