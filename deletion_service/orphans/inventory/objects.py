"""Every stored object (OFFLOADED_OBJECTS): a bucket as ranges of names, a directory as one task."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial

from pyspark.sql import DataFrame, SparkSession

from deletion_service.orphans.inventory.common import kept, table
from deletion_service.orphans.inventory.locations import ObjectLocation
from deletion_service.orphans.schemas import (
    OFFLOADED_OBJECTS,
)
from offloaders.registry import OffloaderSettings, offloader_for


@dataclass(frozen=True)
class NameRange:
    """A range of object names one task lists: ``prefix``-ed, after ``start_after``, before ``end``;
    ``skip_hex`` drops names starting with a lower-case hex digit (another task's prefix)."""

    prefix: str = ""
    start_after: str | None = None
    end: str | None = None
    skip_hex: bool = False


_HEX = "0123456789abcdef"
_LAST = "\U0010ffff"
#: A bucket split by the first character of an offload uuid, plus the three gaps around those
#: sixteen prefixes, so a name that is no offload object (``other``) is listed too, exactly once.
S3_RANGES = (
    *(NameRange(prefix=c) for c in _HEX),
    NameRange(end="0", skip_hex=True),
    NameRange(start_after="9" + _LAST, end="a", skip_hex=True),
    NameRange(start_after="f" + _LAST, skip_hex=True),
)


def _list_range(settings: OffloaderSettings, location: ObjectLocation, names: NameRange) -> Iterator[tuple]:
    """OFFLOADED_OBJECTS rows of one range of one location (the offloader lists in name order)."""
    offloader = offloader_for(location.driver, settings)
    for head in offloader.list_objects(location.storage, names.prefix, names.start_after):
        if names.end is not None and head.name >= names.end:
            return
        if names.skip_hex and head.name[:1] in _HEX:
            continue
        parsed = offloader.describe_object(head.name)
        yield (location.location, head.name, parsed.uuid, parsed.ledger_id, parsed.kind.value, head.size,
               head.last_modified_ms or 0)


def _list_tasks(settings: OffloaderSettings, tasks: Iterable[tuple[ObjectLocation, NameRange]]) -> Iterator[tuple]:
    for location, names in tasks:
        yield from _list_range(settings, location, names)


def offloaded_objects(spark: SparkSession, locations: Sequence[ObjectLocation],
                      settings: OffloaderSettings | None = None) -> DataFrame:
    """Every object at ``locations`` (OFFLOADED_OBJECTS): an S3 bucket as 19 ranges of names,
    each a task with its own offloader and client; a filesystem root as one task.

    ``settings`` carry the allow-list, checked again by the offloader in every task."""
    settings = settings or OffloaderSettings()
    tasks = [(loc, names) for loc in locations for names in (S3_RANGES if loc.is_s3 else (NameRange(),))]
    if not tasks:
        return kept(spark.createDataFrame([], OFFLOADED_OBJECTS))
    rdd = spark.sparkContext.parallelize(tasks, len(tasks)).mapPartitions(partial(_list_tasks, settings))
    return table(spark, rdd, OFFLOADED_OBJECTS)
