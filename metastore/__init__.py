"""Metadata stores (ZooKeeper, SQLite) behind one interface, plus Pulsar/BookKeeper formats."""

from metastore.factory import open_store
from metastore.interface import (
    ABSENT,
    ANY,
    BadVersionError,
    CheckVersion,
    Delete,
    Leadership,
    MetadataStore,
    MetadataStoreError,
    MetadataStoreUnavailable,
    MultiOpError,
    Node,
    NodeDeleteOutcome,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Put,
    RequestTooLargeError,
    walk,
)
from metastore.url import InvalidStoreUrl

__all__ = [
    "ABSENT", "ANY", "BadVersionError", "CheckVersion", "Delete", "InvalidStoreUrl", "Leadership",
    "MetadataStore", "MetadataStoreError", "MetadataStoreUnavailable", "MultiOpError", "Node",
    "NodeDeleteOutcome", "NodeExistsError", "NoNodeError", "NotEmptyError", "Put", "RequestTooLargeError",
    "open_store", "walk",
]
