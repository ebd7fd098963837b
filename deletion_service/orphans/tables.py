"""The scan's tables as one value each, so steps pass them along without naming five arguments."""

from __future__ import annotations

from dataclasses import dataclass, fields

from pyspark.sql import DataFrame


@dataclass(frozen=True)
class Inventories:
    """What the scan read; columns in :mod:`.schemas` (``INVENTORIES``, same names)."""

    bk_ledgers: DataFrame
    references: DataFrame
    offload_references: DataFrame
    topics: DataFrame
    offloaded_objects: DataFrame

    def items(self) -> list[tuple[str, DataFrame]]:
        return [(f.name, getattr(self, f.name)) for f in fields(self)]


@dataclass(frozen=True)
class Results:
    """What reconciliation concluded; columns in :mod:`.schemas` (``RESULTS``, same names)."""

    orphan_ledgers: DataFrame
    missing_ledgers: DataFrame
    orphan_objects: DataFrame

    def items(self) -> list[tuple[str, DataFrame]]:
        return [(f.name, getattr(self, f.name)) for f in fields(self)]
