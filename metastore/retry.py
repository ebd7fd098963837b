"""The retry policy for metadata reads, for callers to wrap their reads in.

Why callers and not the store: a backend that retried reads itself stacked
with its callers' own retries (the ZooKeeper store's three tries under the
delete phase's three made nine for one read), and hid how long a read could
take.  The stores try once and report :class:`MetadataStoreUnavailable`; a
command that can afford to wait wraps each read in :func:`read_retry`, with
the same brief pauses (0.2 s, then 0.4 s) that used to ride out a reconnect.

Reads only: a write whose reply was lost may have been applied, so only the
caller, by re-reading, can decide whether to write again.
"""

from __future__ import annotations

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from metastore.interface import MetadataStoreUnavailable


def read_retry(attempts: int = 3, max_wait_s: float = 2.0) -> Retrying:
    """A few quick tries of a read while the store is unavailable; then its error, unchanged.

    Use as ``read_retry()(store.get, path)``.  Any other error (a missing
    node, a refused path, an undecodable node) is not retried: trying again
    would give the same answer.
    """
    return Retrying(
        stop=stop_after_attempt(attempts), wait=wait_exponential(multiplier=0.2, max=max_wait_s),
        retry=retry_if_exception_type(MetadataStoreUnavailable), reraise=True,
    )
