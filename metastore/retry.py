"""The one retry policy: a few quick tries of a call that is safe to repeat, for callers to wrap their calls in.

Why callers and not the store: a backend that retried reads itself stacked
with its callers' own retries (the ZooKeeper store's three tries under the
delete phase's three made nine for one read), and hid how long a read could
take.  The stores try once and report :class:`MetadataStoreUnavailable`; a
command that can afford to wait wraps each read in :func:`read_retry`, with
the same brief pauses (0.2 s, then 0.4 s) that used to ride out a reconnect.

Every in-process retry of a storage call is this policy, told what is
transient (``on``) and how many tries (``attempts``): metadata reads
(:func:`read_retry`) and the delete phase's storage calls, which count the
object store's transient error too (``deletion_service.delete_phase.storage.retry``).  One exception, below
this module: ``MetadataStore._reread`` (``interface.py``, which this module
imports) reads back an in-doubt delete with the same pauses over five tries.

Calls safe to repeat only: reads, and deletes known not to have been applied
or applied harmlessly again (an object store's delete).  A write whose reply
was lost may have been applied, so only the caller, by re-reading, can decide
whether to write again.
"""

from __future__ import annotations

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from metastore.interface import MetadataStoreUnavailable


def retrying(on: tuple[type[BaseException], ...], attempts: int = 3, max_wait_s: float = 2.0) -> Retrying:
    """Up to ``attempts`` tries while the call raises one of ``on``, pausing 0.2 s, 0.4 s, …
    (at most ``max_wait_s``); then its error, unchanged.  Any other error is not retried:
    trying again would give the same answer."""
    return Retrying(
        stop=stop_after_attempt(attempts), wait=wait_exponential(multiplier=0.2, max=max_wait_s),
        retry=retry_if_exception_type(on), reraise=True,
    )


def read_retry(attempts: int = 3, max_wait_s: float = 2.0) -> Retrying:
    """A few quick tries of a read while the store is unavailable; then its error, unchanged.

    Use as ``read_retry()(store.get, path)``.  Any other error (a missing
    node, a refused path, an undecodable node) is not retried: trying again
    would give the same answer.
    """
    return retrying((MetadataStoreUnavailable,), attempts, max_wait_s)
