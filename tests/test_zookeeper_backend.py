"""What only the ZooKeeper backend has: chroot, digest auth, losing the server."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.security import make_digest_acl

from metastore import ABSENT, MetadataStoreError, MetadataStoreUnavailable, open_store
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
