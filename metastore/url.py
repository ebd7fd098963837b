"""Metadata-store URLs, in this project's form and in the forms Pulsar's own configuration uses.

Accepted:

* ``zk://host:port[,host:port][/chroot]`` and ``sqlite:///path`` (this project's form);
* ``zk:host:port[,host:port][/chroot]``, Pulsar's ``metadataStoreUrl``;
* ``host:port[,host:port][/chroot]`` with no prefix, which Pulsar still reads as ZooKeeper;
* ``metadata-store:<metadataStoreUrl>``, Pulsar's ``bookkeeperMetadataServiceUri``.  A broker builds it as
  ``"metadata-store:" + metadataStoreUrl + "/ledgers"``, so a last path element ``ledgers`` names
  BookKeeper's ledgers root inside the store (``bookkeeperLedgersRootPath``), not part of the chroot.

Oxia, etcd, RocksDB and the in-memory store are refused with one sentence saying so: this tool does not
read them yet, and guessing would read the wrong cluster.  Credentials never travel in the URL (URLs end
up in logs, process listings and ``config show``); digest auth comes from a secret file or the environment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_HOST_PORT = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


class InvalidStoreUrl(ValueError):
    """The URL cannot name a metadata store; the message says what to write instead."""


@dataclass(frozen=True)
class ZooKeeperUrl:
    hosts: tuple[tuple[str, int], ...]
    chroot: str  # "" or "/a/b"

    @property
    def connect_string(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.hosts) + self.chroot


@dataclass(frozen=True)
class SqliteUrl:
    path: Path


StoreUrl = ZooKeeperUrl | SqliteUrl

_EXAMPLES = ("expected zk://host:2181[,host:2181][/chroot], Pulsar's zk:host:2181[,host:2181][/chroot], "
             "or sqlite:///path/to/metadata.db")

#: Pulsar's ``bookkeeperMetadataServiceUri`` prefix: what follows is a ``metadataStoreUrl``.
_METADATA_STORE_PREFIX = "metadata-store:"
#: The stores Pulsar runs on that this tool cannot read yet, by the prefix Pulsar's URLs give them.
_UNSUPPORTED = {"oxia://": "Oxia", "etcd:": "etcd", "rocksdb:": "RocksDB", "memory:": "the in-memory store"}
#: Pulsar's own ``bookkeeperMetadataServiceUri`` ends in BookKeeper's default ledgers root.
_LEDGERS_ROOT = "/ledgers"


def parse_store_url(url: str) -> StoreUrl:
    """Parse ``url`` (any accepted form above); :class:`InvalidStoreUrl` says what to write instead."""
    if not url or not isinstance(url, str):
        raise InvalidStoreUrl(f"empty metadata store URL; {_EXAMPLES}")
    if url.startswith(_METADATA_STORE_PREFIX):
        inner = url[len(_METADATA_STORE_PREFIX):]
        parsed = parse_store_url(inner)
        if isinstance(parsed, ZooKeeperUrl) and parsed.chroot.endswith(_LEDGERS_ROOT):
            return ZooKeeperUrl(parsed.hosts, parsed.chroot[: -len(_LEDGERS_ROOT)])
        return parsed
    for prefix, name in _UNSUPPORTED.items():
        if url.startswith(prefix):
            raise InvalidStoreUrl(f"metadata store URL {_redact(url)!r} names {name}, which this tool does not "
                                  "support yet: it reads ZooKeeper (and its own embedded SQLite store) only")
    scheme, sep, rest = url.partition("://")
    if not sep:
        if url.startswith("zk:"):  # Pulsar's metadataStoreUrl
            return _parse_zk(url, url[len("zk:"):])
        if _HOST_PORT.match(url.partition("/")[0].split(",")[0].strip()):  # Pulsar reads a bare list as ZooKeeper
            return _parse_zk(url, url)
        raise InvalidStoreUrl(f"metadata store URL {url!r} has no scheme; {_EXAMPLES}")
    if scheme == "sqlite":
        if not rest.startswith("/") or rest == "/":
            raise InvalidStoreUrl(f"SQLite URL {url!r} needs an absolute path: sqlite:///abs/path/metadata.db")
        return SqliteUrl(Path(rest))
    if scheme in ("zk", "zookeeper"):
        return _parse_zk(url, rest)
    raise InvalidStoreUrl(f"unknown metadata store scheme {scheme!r} in {url!r}; {_EXAMPLES}")


def _parse_zk(url: str, rest: str) -> ZooKeeperUrl:
    if "@" in rest.split("/", 1)[0]:
        raise InvalidStoreUrl(
            f"credentials in the ZooKeeper URL are not accepted ({_redact(url)}); "
            "put user:password in the file named by metadataStoreDigestFile"
        )
    hosts_part, slash, chroot = rest.partition("/")
    chroot = ("/" + chroot).rstrip("/") if slash else ""
    if chroot and ("//" in chroot or any(s in (".", "..") for s in chroot.split("/")[1:])):
        raise InvalidStoreUrl(f"invalid chroot {chroot!r} in ZooKeeper URL {url!r}")
    hosts: list[tuple[str, int]] = []
    for item in hosts_part.split(","):
        m = _HOST_PORT.match(item.strip())
        if not m or not 0 < int(m.group(2)) < 65536:
            raise InvalidStoreUrl(f"invalid host:port {item!r} in ZooKeeper URL {url!r}; {_EXAMPLES}")
        hosts.append((m.group(1), int(m.group(2))))
    return ZooKeeperUrl(tuple(hosts), chroot)


def _redact(url: str) -> str:
    """``url`` with whatever precedes an ``@`` in its host part starred out (``zk://`` and ``zk:`` forms)."""
    return re.sub(r"(^|[/:])[^/@]*@", r"\1***@", url)
