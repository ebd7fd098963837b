"""kazoo's exceptions as the metadata store's errors, typed by what the caller should do next.

Connection and session losses become :class:`MetadataStoreUnavailable`
(transient); :class:`NotSentError` when the request was refused before it was
queued (not connected), so a caller knows it was not applied.  Only the
ZooKeeper backend modules import this (and kazoo).
"""

from __future__ import annotations

from kazoo import exceptions as kx
from kazoo.handlers.threading import KazooTimeoutError

from metastore.interface import (
    BadVersionError,
    MetadataStoreError,
    MetadataStoreUnavailable,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    NotSentError,
)

#: What a failed kazoo request may raise: the errors a backend call maps with :func:`map_error`.
KAZOO_ERRORS = (kx.KazooException, KazooTimeoutError)


class NotConnected(kx.ConnectionLoss):
    """Refused by this store before the request was queued: it never reached the server."""


def describe(e: BaseException) -> str:
    return type(e).__name__ + (f": {e}" if str(e) else "")


def map_error(e: BaseException, path: str) -> MetadataStoreError:
    """The store's error for kazoo's ``e`` on ``path`` (a path, or what the request was)."""
    if isinstance(e, NotConnected):
        return NotSentError(f"ZooKeeper unavailable while accessing {path}: not connected (nothing sent)")
    if isinstance(e, kx.NoNodeError):
        return NoNodeError(f"{path} does not exist")
    if isinstance(e, kx.NodeExistsError):
        return NodeExistsError(f"{path} already exists")
    if isinstance(e, kx.BadVersionError):
        return BadVersionError(f"{path} changed since it was read (version mismatch)")
    if isinstance(e, kx.NotEmptyError):
        return NotEmptyError(f"{path} has children")
    if isinstance(e, kx.NoAuthError | kx.AuthFailedError):
        return MetadataStoreError(f"ZooKeeper refused access to {path}: check the digest credentials")
    if isinstance(e, kx.ConnectionLoss | kx.SessionExpiredError | kx.ConnectionClosedError
                  | kx.OperationTimeoutError | KazooTimeoutError | kx.ZookeeperStoppedError):
        return MetadataStoreUnavailable(f"ZooKeeper unavailable while accessing {path}: {describe(e)}")
    return MetadataStoreError(f"ZooKeeper error on {path}: {describe(e)}")
