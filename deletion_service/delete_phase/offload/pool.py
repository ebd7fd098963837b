"""The process's one pool of threads for offloaded copies' storage calls.

Verifying (``gather.py``) and deleting (``execute.py``) a batch's offloaded
copies each call an object store per request, in milliseconds each: several in
flight at once, up to :data:`OFFLOAD_CONCURRENCY`.  One pool for the process,
its threads kept: starting threads per batch cost memory (each new thread's
allocations land in fresh malloc arenas) as well as time.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from offloaders.interface import OFFLOAD_CONCURRENCY

T = TypeVar("T")


def in_parallel(calls: Sequence[Callable[[], T]]) -> list[T]:
    """Each call's result, in order; up to :data:`OFFLOAD_CONCURRENCY` at once.  Every call
    handles its own errors (the offload gatherer and deleter turn each into a fact or a result)."""
    if len(calls) <= 1:
        return [call() for call in calls]
    return list(_offload_pool().map(lambda call: call(), calls))


@functools.cache
def _offload_pool() -> ThreadPoolExecutor:
    """Made on first use, kept for the process (see the module's docstring)."""
    return ThreadPoolExecutor(max_workers=OFFLOAD_CONCURRENCY, thread_name_prefix="offload")
