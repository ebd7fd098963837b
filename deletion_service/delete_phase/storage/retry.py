"""What the delete phase counts as a transient storage failure, and how often it tries again in process.

The policy itself is :mod:`metastore.retry`'s, the one in the process; only the
exception set differs from a metadata read's: the delete phase talks to the
object store too, whose transient error is retried the same way.  After these
quick tries the failure becomes a fact (``transient``) and the request is
reconsumed later: a longer outage is the breakers' business, not a loop's.
"""

from __future__ import annotations

from tenacity import Retrying

from metastore.interface import MetadataStoreUnavailable
from metastore.retry import retrying
from offloaders.interface import OffloadTransientError

#: Failures a later try may not repeat: the metadata store or an offload target did not answer.
TRANSIENT: tuple[type[Exception], ...] = (MetadataStoreUnavailable, OffloadTransientError)


def in_process_retry(attempts: int = 3, max_wait_s: float = 2.0) -> Retrying:
    """Transient errors get a few quick tries before the request is reconsumed later."""
    return retrying(TRANSIENT, attempts, max_wait_s)
