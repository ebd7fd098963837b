"""Driver name -> deleter, with the allow-list applied before anything is built.

The daemon builds one :class:`OffloaderSettings` from its config (camelCase keys
``offloadAllowedDrivers``, ``offloadAllowedBuckets``, ``offloadAllowedEndpoints``
and the filesystem base directory) and asks :func:`offloader_for` per message.
Offloaders are cached per (settings, driver family) so boto3 clients (cached
inside the S3 offloader per endpoint and region) are reused across messages.

The S3 offloader is imported only when an S3-family driver is asked for, as
:func:`metastore.factory.open_store` does for its backends: importing boto3 and
botocore takes about a third of a second, which a CLI command, a filesystem-only
cluster or a test that never meets an S3 target should not pay.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from offloaders.allow_list import S3_FAMILY_DRIVERS, AllowList, decide_driver, normalize_driver
from offloaders.filesystem import FileSystemOffloader
from offloaders.interface import Offloader, OffloadNotAllowedError, OffloadTargetError


@dataclass(frozen=True)
class OffloaderSettings:
    """What building an offloader needs (hashable, so offloaders can be cached).

    ``filesystem_base_dir`` None disables the filesystem driver (embedded mode
    sets it to ``<data-dir>/offload``)."""

    allow: AllowList = field(default_factory=AllowList)
    filesystem_base_dir: Path | None = None
    s3_connect_timeout: float = 2.0
    s3_read_timeout: float = 5.0
    #: botocore attempts per call (1 = no internal retry; the caller retries).
    s3_max_attempts: int = 1

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> OffloaderSettings:
        """From camelCase config; ``offloadFileSystemBaseDir`` names the filesystem root."""
        base = config.get("offloadFileSystemBaseDir")
        return cls(allow=AllowList.from_config(config), filesystem_base_dir=Path(base) if base else None)


def offloader_for(driver_name: str, config: OffloaderSettings | Mapping[str, Any]) -> Offloader:
    """The deleter for ``driver_name``.

    Raises :class:`OffloadNotAllowedError` for an unknown or disallowed driver (the
    caller acks and counts ``metadata_mismatch``) and :class:`OffloadTargetError`
    for the filesystem driver without a base directory (a configuration problem)."""
    settings = config if isinstance(config, OffloaderSettings) else OffloaderSettings.from_config(config)
    decision = decide_driver(settings.allow, driver_name)
    if not decision:
        raise OffloadNotAllowedError(f"offload driver {driver_name!r} refused: {decision.reason}")
    family = "s3" if normalize_driver(driver_name) in S3_FAMILY_DRIVERS else "filesystem"
    return _build(settings, family)


@functools.lru_cache(maxsize=64)
def _build(settings: OffloaderSettings, family: str) -> Offloader:
    if family == "s3":
        from offloaders.s3 import S3Offloader  # boto3 only when an S3 target is met

        return S3Offloader(settings.allow, connect_timeout=settings.s3_connect_timeout,
                           read_timeout=settings.s3_read_timeout, max_attempts=settings.s3_max_attempts)
    if settings.filesystem_base_dir is None:
        raise OffloadTargetError("the filesystem offload driver needs a base directory "
                                 "(offloadFileSystemBaseDir, or --data-dir in embedded mode)")
    return FileSystemOffloader(settings.filesystem_base_dir, settings.allow)
