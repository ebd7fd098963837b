"""Open a metadata store from its URL: the only place that picks a backend."""

from __future__ import annotations

from pathlib import Path

from metastore.interface import MetadataStore
from metastore.url import SqliteUrl, parse_store_url


def open_store(url: str, digest_file: Path | None = None, connect_timeout_s: float = 5.0,
               create: bool = True) -> MetadataStore:
    """Connect to the store named by ``url``; errors are operator-readable.  ``create`` False:
    an embedded (SQLite) store that does not exist is an error, not created empty.

    Raises :class:`metastore.url.InvalidStoreUrl` for a malformed URL and
    :class:`metastore.interface.MetadataStoreUnavailable` when it cannot be reached.
    """
    parsed = parse_store_url(url)
    if isinstance(parsed, SqliteUrl):
        from metastore.sqlite_store import SqliteMetadataStore

        return SqliteMetadataStore(parsed.path, create=create)
    from metastore.zookeeper.store import ZooKeeperMetadataStore

    return ZooKeeperMetadataStore(parsed, digest_file=digest_file, connect_timeout_s=connect_timeout_s)
