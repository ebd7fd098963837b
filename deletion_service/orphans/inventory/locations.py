"""Where offloaded objects live: location strings, the configured scope, which locations get listed."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame

from deletion_service.config import DeletionConfig
from deletion_service.orphans.inventory.common import InventoryError
from offloaders.allow_list import (
    FILESYSTEM_DRIVERS,
    S3_FAMILY_DRIVERS,
    decide,
    normalize_driver,
    normalize_endpoint,
)
from offloaders.interface import OffloadError, OffloadTransientError, StorageLocation
from offloaders.registry import OffloaderSettings, offloader_for

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ObjectLocation:
    """One place offloaded objects live: its ``location`` string and how to list it."""

    location: str
    driver: str
    metadata: tuple[tuple[str, str], ...] = ()

    @property
    def storage(self) -> StorageLocation:
        return StorageLocation(self.driver, dict(self.metadata))

    @property
    def is_s3(self) -> bool:
        return normalize_driver(self.driver) in S3_FAMILY_DRIVERS


_S3 = "s3://"
_FILESYSTEM = "filesystem://"
_ENDPOINT = "?endpoint="
#: The filesystem driver's root key (``offloaders.filesystem.STORAGE_BASE_PATH_KEY``).
_STORAGE_BASE_PATH = "storageBasePath"


@dataclass(frozen=True)
class OffloadScope:
    """What the configuration says about tiered storage, for naming and listing locations.

    ``fallback_*``: the cluster's ``managedLedgerOffload*`` settings, where objects of an
    offload context without driver metadata went (as ``mark_phase.pick`` reads them)."""

    settings: OffloaderSettings = field(default_factory=OffloaderSettings)
    fallback_driver: str | None = None
    fallback_metadata: tuple[tuple[str, str], ...] = ()
    allowed_buckets: tuple[str, ...] = ()

    @classmethod
    def of(cls, config: DeletionConfig, settings: OffloaderSettings | None = None) -> OffloadScope:
        """From the config (``settings`` as the CLI built them, e.g. the embedded offload dir)."""
        keys = {"bucket": config.managed_ledger_offload_bucket, "region": config.managed_ledger_offload_region,
                "serviceEndpoint": config.managed_ledger_offload_service_endpoint}
        driver = (config.managed_ledger_offload_driver or "").strip() or None
        return cls(settings or OffloaderSettings.from_config(config.camel()), driver,
                   tuple((k, v) for k, v in keys.items() if v), tuple(config.offload_allowed_buckets))

    def location_of(self, driver: str | None, metadata: Mapping[str, str]) -> ObjectLocation | None:
        """Where an offload context's objects went; ``None`` when it cannot be told (no driver
        recorded and none configured, or an S3 target without a bucket)."""
        if not driver:
            if self.fallback_driver is None:
                return None
            driver, metadata = self.fallback_driver, {**dict(self.fallback_metadata), **metadata}
        name = normalize_driver(driver)
        if name in S3_FAMILY_DRIVERS:
            bucket = (metadata.get("bucket") or "").strip()
            if not bucket:
                return None
            endpoint = normalize_endpoint(metadata.get("serviceEndpoint") or metadata.get("endpoint"))
            keep = {"bucket": bucket, "serviceEndpoint": endpoint, "region": (metadata.get("region") or "").strip()}
            return ObjectLocation(f"{_S3}{bucket}" + (f"{_ENDPOINT}{endpoint}" if endpoint else ""), driver,
                                  tuple((k, v) for k, v in keep.items() if v))
        if name in FILESYSTEM_DRIVERS:
            root = self._filesystem_root(metadata.get(_STORAGE_BASE_PATH))
            return None if root is None else ObjectLocation(f"{_FILESYSTEM}{root}", driver,
                                                            ((_STORAGE_BASE_PATH, str(root)),))
        return ObjectLocation(f"{name}://{metadata.get('bucket') or ''}", driver, tuple(sorted(metadata.items())))

    def _filesystem_root(self, raw: str | None) -> Path | None:
        """The directory a filesystem offload wrote under, as ``FileSystemOffloader`` resolves it."""
        base = self.settings.filesystem_base_dir
        text = (raw or "").strip()
        if not text or text == "null":  # upstream writes "null" when hadoop.tmp.dir is unset
            return base.resolve() if base is not None else None
        text = text.removeprefix("file://")
        if "://" in text:
            return None
        path = Path(text)
        if path.is_absolute():
            return path.resolve()
        return (base / path).resolve() if base is not None else None

    def parse(self, location: str) -> ObjectLocation | None:
        """A ``location`` string back into something to list (region from the config);
        ``None`` for a driver we do not implement."""
        if location.startswith(_S3):
            bucket, _, endpoint = location[len(_S3):].partition(_ENDPOINT)
            region = dict(self.fallback_metadata).get("region", "")
            return self.location_of(self._s3_driver(), {"bucket": bucket, "serviceEndpoint": endpoint,
                                                        "region": region})
        if location.startswith(_FILESYSTEM):
            return self.location_of("filesystem", {_STORAGE_BASE_PATH: location[len(_FILESYSTEM):]})
        return None

    def _s3_driver(self) -> str:
        """The S3-family driver name to list with: any allowed one lists the same way, so the
        configured one if allowed, else the first allowed (else the configured, to be refused)."""
        allowed = self.settings.allow.drivers & S3_FAMILY_DRIVERS
        preferred = normalize_driver(self.fallback_driver or "")
        if preferred in allowed or not allowed:
            return preferred or "aws-s3"
        return sorted(allowed)[0]

    def configured(self) -> list[ObjectLocation]:
        """The locations the configuration names: the cluster's offload bucket, the allowed
        buckets (at the configured endpoint), the filesystem base directory."""
        fallback = dict(self.fallback_metadata)
        found = [self.location_of(self.fallback_driver, {})] if self.fallback_driver else []
        found += [self.location_of(self._s3_driver(), {**fallback, "bucket": b}) for b in self.allowed_buckets]
        if self.settings.filesystem_base_dir is not None:
            found.append(self.location_of("filesystem", {}))
        return [loc for loc in found if loc is not None]

    def refusal(self, location: ObjectLocation) -> str | None:
        """Why the allow-list refuses to list ``location`` (``None``: allowed)."""
        md = dict(location.metadata)
        decision = decide(self.settings.allow, location.driver, md.get("bucket"), md.get("serviceEndpoint"))
        return None if decision else decision.reason


@dataclass(frozen=True)
class LocationPlan:
    """Which locations the object inventory lists, and which it leaves out and why."""

    listed: list[ObjectLocation]
    refused: dict[str, str]  # location string -> reason it is not listed


def object_locations(scope: OffloadScope, offload_references: DataFrame) -> LocationPlan:
    """The locations to list: every distinct one the references name (a small collect), then
    the configured ones; each checked against the allow-list and tried once on the driver, so
    a missing bucket or a wrong endpoint is reported here rather than failing a task."""
    named = [r.location for r in offload_references.select("location").where("location IS NOT NULL")
             .distinct().orderBy("location").collect()]
    listed: dict[str, ObjectLocation] = {}
    refused: dict[str, str] = {}
    for text, location in [*((t, scope.parse(t)) for t in named), *((c.location, c) for c in scope.configured())]:
        if text in refused or text in listed:
            continue
        why = "offload driver not implemented" if location is None else (
            scope.refusal(location) or _probe(location, scope.settings))
        if location is not None and why is None:
            listed[text] = location
        else:
            _log.info("not listing offloaded objects at %s: %s", text, why)  # the scan reports it
            refused[text] = str(why)
    return LocationPlan(list(listed.values()), refused)


def _probe(location: ObjectLocation, settings: OffloaderSettings) -> str | None:
    """List one page at ``location``; why it cannot be listed, or ``None``.  A transient failure
    fails the scan (try again later) instead of leaving a location out."""
    try:
        next(iter(offloader_for(location.driver, settings).list_objects(location.storage)), None)
    except OffloadTransientError as e:
        raise InventoryError(f"listing offloaded objects at {location.location}: {e} (try again later)") from e
    except OffloadError as e:
        return str(e)
    return None
