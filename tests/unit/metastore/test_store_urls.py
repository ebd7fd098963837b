"""Metadata-store URLs in every form Pulsar's own configuration writes, and the stores refused."""

from __future__ import annotations

import pytest

from metastore.url import InvalidStoreUrl, SqliteUrl, ZooKeeperUrl, parse_store_url


@pytest.mark.parametrize("url,hosts,chroot", [
    ("zk://zk-1:2181,zk-2:2181/pulsar", (("zk-1", 2181), ("zk-2", 2181)), "/pulsar"),
    # Pulsar's metadataStoreUrl
    ("zk:my-zk-1:2181,my-zk-2:2181,my-zk-3:2181", (("my-zk-1", 2181), ("my-zk-2", 2181), ("my-zk-3", 2181)), ""),
    ("zk:zk-1:2181/pulsar/east", (("zk-1", 2181),), "/pulsar/east"),
    # a bare host list, which Pulsar still takes as ZooKeeper
    ("zk-1:2181,zk-2:2181", (("zk-1", 2181), ("zk-2", 2181)), ""),
    ("127.0.0.1:2181/pulsar", (("127.0.0.1", 2181),), "/pulsar"),
    # bookkeeperMetadataServiceUri as a broker builds it: "metadata-store:" + metadataStoreUrl + "/ledgers"
    ("metadata-store:zk:zk-1:2181/ledgers", (("zk-1", 2181),), ""),
    ("metadata-store:zk:zk-1:2181,zk-2:2181/pulsar/ledgers", (("zk-1", 2181), ("zk-2", 2181)), "/pulsar"),
    ("metadata-store:zk:zk-1:2181", (("zk-1", 2181),), ""),
])
def test_pulsars_forms_name_the_same_zookeeper(url: str, hosts: tuple, chroot: str) -> None:
    assert parse_store_url(url) == ZooKeeperUrl(hosts, chroot)


def test_sqlite_is_unchanged() -> None:
    parsed = parse_store_url("sqlite:///var/lib/ld/metadata.db")
    assert isinstance(parsed, SqliteUrl) and str(parsed.path) == "/var/lib/ld/metadata.db"


@pytest.mark.parametrize("url,store", [
    ("oxia://oxia:6648/broker", "Oxia"),
    ("etcd:http://etcd-1:2379,http://etcd-2:2379", "etcd"),
    ("rocksdb:/pulsar/data/metadata", "RocksDB"),
    ("memory:local", "the in-memory store"),
    ("metadata-store:oxia://oxia:6648/bookkeeper", "Oxia"),
])
def test_stores_not_supported_yet_are_refused_in_one_sentence(url: str, store: str) -> None:
    with pytest.raises(InvalidStoreUrl) as refused:
        parse_store_url(url)
    message = str(refused.value)
    assert f"names {store}, which this tool does not support yet" in message and "ZooKeeper" in message


@pytest.mark.parametrize("url,fragment", [
    ("localhost", "has no scheme"),
    ("zk:zk-1", "invalid host:port"),
    ("zk:user:pw@zk-1:2181", "credentials in the ZooKeeper URL are not accepted"),
])
def test_malformed_forms_say_what_to_write(url: str, fragment: str) -> None:
    with pytest.raises(InvalidStoreUrl, match=fragment) as refused:
        parse_store_url(url)
    assert "pw" not in str(refused.value)
