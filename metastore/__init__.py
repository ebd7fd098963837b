"""Metadata stores (ZooKeeper, SQLite) behind one interface, plus Pulsar/BookKeeper formats."""

from metastore.factory import open_store
from metastore.interface import (
    ABSENT,
    ANY,
    BadVersionError,
    CheckVersion,
    Delete,
    DeleteOutcome,
    MetadataStore,
    MetadataStoreError,
    MetadataStoreUnavailable,
    MultiOpError,
    Node,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Put,
    RequestTooLargeError,
)
from metastore.url import InvalidStoreUrl

__all__ = [
    "ABSENT", "ANY", "BadVersionError", "CheckVersion", "Delete", "DeleteOutcome", "InvalidStoreUrl",
    "MetadataStore", "MetadataStoreError", "MetadataStoreUnavailable", "MultiOpError", "Node",
    "NodeExistsError", "NoNodeError", "NotEmptyError", "Put", "RequestTooLargeError", "open_store",
]
