"""Whether the daemon decides BookKeeper requests in a delete process (``ledgerDeletionDeleteProcess``).

``auto`` (the default) turns it on where it pays and is safe: the metadata stores are ZooKeeper
(each process opens its own session; the embedded SQLite store is for one process) and the daemon
may use two CPUs or more (its affinity, and the container's CPU quota: a pod limited to one core
gains nothing from a second process but its memory).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from deletion_service.errors import UsageError
from metastore.url import SqliteUrl, parse_store_url

#: cgroup v2's CPU quota of this container ("max 100000", or "200000 100000": two cores).
CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def usable_cpus(cpu_max: Path = CPU_MAX) -> float:
    """CPUs this process may use: its affinity, capped by the cgroup quota when there is one."""
    cpus = float(len(os.sched_getaffinity(0)))
    try:
        quota, period = cpu_max.read_text().split()[:2]
    except (OSError, ValueError):
        return cpus
    if quota == "max":
        return cpus
    try:
        return min(cpus, int(quota) / int(period))
    except (ValueError, ZeroDivisionError):
        return cpus


def use_delete_process(choice: str, store_urls: list[str], cpus: float | None = None) -> bool:
    """``choice`` (auto/on/off) for stores at ``store_urls``; ``on`` with the embedded store is a usage error."""
    embedded = any(isinstance(parse_store_url(url), SqliteUrl) for url in store_urls)
    if choice == "off":
        return False
    if choice == "on":
        if embedded:
            raise UsageError("ledgerDeletionDeleteProcess = on needs a ZooKeeper metadata store (--metadata-store "
                             "zk://…); the embedded store serves one process")
        return True
    cpus = usable_cpus() if cpus is None else cpus
    return not embedded and math.floor(cpus + 1e-9) >= 2
