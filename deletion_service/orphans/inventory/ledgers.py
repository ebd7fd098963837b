"""BookKeeper's ledgers (BK_LEDGERS): one Spark task per subtree of the ledger layout."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

from pyspark.sql import DataFrame, SparkSession

from deletion_service.orphans.batching import batched
from deletion_service.orphans.inventory.common import (
    READ_AHEAD,
    READ_CHUNK,
    InventoryError,
    StoreSpec,
    kept,
    read_nodes,
    table,
)
from deletion_service.orphans.schemas import (
    BK_LEDGERS,
)
from deletion_service.protocol.references import ledger_kind
from metastore.formats import (
    FormatError,
    LedgerLayout,
    decode_ledger_metadata,
    iter_ledger_ids,
    ledger_path,
    read_layout,
)
from metastore.formats.custom_metadata import (
    APPLICATION_KEY,
    COMPACTED_TOPIC_KEY,
    COMPONENT_KEY,
    CURSOR_KEY,
    MANAGED_LEDGER_KEY,
    SCHEMA_ID_KEY,
)
from metastore.formats.ledger_paths import RESERVED_NAMES
from metastore.interface import MetadataStore, Node

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Subtree:
    """One partition of the ledger layout: names below the root, and directory levels left below it."""

    names: tuple[str, ...]
    levels: int


#: The layout's first level: (digits of its name, 4-digit directory levels below it), as
#: ``metastore.formats.ledger_paths`` walks them: short form 2-4-4, long form 3-4-4-4-4.
_FIRST_LEVELS = {LedgerLayout.HIERARCHICAL: ((2, 1), (3, 3)), LedgerLayout.LONG_HIERARCHICAL: ((3, 3),)}


def ledger_subtrees(store: MetadataStore, root: str, layout: LedgerLayout, min_count: int) -> list[Subtree]:
    """The top-level subtrees of the layout, split one level further (first come, first split)
    until there are ``min_count`` of them or nothing is left to split.

    The top level alone is often one subtree (every id below 10^8 lives under ``00``),
    which would be one task; splitting costs one ``children`` call per split subtree."""
    names = [n for n in store.children(root) if n not in RESERVED_NAMES]
    subtrees = [Subtree((n,), levels) for digits, levels in _FIRST_LEVELS[LedgerLayout(layout)]
                for n in sorted(names) if len(n) == digits and n.isascii() and n.isdigit()]
    queue = deque(subtrees)
    while len(subtrees) < min_count and queue:
        subtree = queue.popleft()
        if subtree.levels == 0:
            continue
        path = "/".join((root.rstrip("/"), *subtree.names))
        children = [Subtree((*subtree.names, c), subtree.levels - 1) for c in sorted(store.children(path))
                    if len(c) == 4 and c.isascii() and c.isdigit()]
        at = subtrees.index(subtree)
        subtrees[at:at + 1] = children
        queue.extend(children)
    return subtrees


class _OneSubtree:
    """The store as seen from one subtree: on the path down to it, each level lists only
    the next name, so the format library's own walker (:func:`iter_ledger_ids`) walks it alone."""

    def __init__(self, store: MetadataStore, root: str, subtree: Subtree) -> None:
        self._store = store
        base = root.rstrip("/")
        self._only = {root: [subtree.names[0]]}  # the walker lists the root as it was given
        self._only.update(("/".join((base, *subtree.names[:i])), [subtree.names[i]])
                          for i in range(1, len(subtree.names)))

    def children(self, path: str) -> list[str]:
        return self._only[path] if path in self._only else self._store.children(path)


def bk_row(ledger_id: int, node: Node | None, read_error: str | None = None) -> tuple | None:
    """One BK_LEDGERS row; ``None`` for a znode gone since it was listed (nothing to inventory)."""
    if read_error is not None:
        return (ledger_id, None, None, None, None, None, None, None, None, None, None, read_error, None)
    if node is None:
        return None
    try:
        meta = decode_ledger_metadata(node.data)
    except Exception as e:  # noqa: BLE001 - bytes anyone can write: any decoder surprise is an error row
        return (ledger_id, None, node.ctime_ms, None, None, None, None, None, None, None, None,
                f"{type(e).__name__}: {e}", None)
    custom = {k: v.decode("utf-8", errors="replace") for k, v in meta.custom_metadata.items()}
    return (ledger_id, meta.state, meta.ctime_or(node.ctime_ms), meta.length, custom.get(APPLICATION_KEY),
            custom.get(COMPONENT_KEY), custom.get(MANAGED_LEDGER_KEY), custom.get(CURSOR_KEY),
            custom.get(SCHEMA_ID_KEY), custom.get(COMPACTED_TOPIC_KEY), custom, None, ledger_kind(custom).value)


def _ledger_rows(store: MetadataStore, root: str, layout: LedgerLayout, ids: Iterable[int]) -> Iterator[tuple]:
    """Rows of ``ids``, READ_AHEAD chunks in flight while one is decoded (and the walk goes on)."""
    def read(chunk: list[tuple[int, str]]) -> tuple[list[tuple[int, str]], dict[str, Node | None], dict[str, str]]:
        return chunk, *read_nodes(store, [path for _, path in chunk])

    def rows(done: Future) -> Iterator[tuple]:
        chunk, nodes, failed = done.result()
        for lid, path in chunk:
            row = bk_row(lid, nodes.get(path), failed.get(path))
            if row is not None:
                yield row

    pending: deque[Future] = deque()
    with ThreadPoolExecutor(max_workers=READ_AHEAD, thread_name_prefix="bk-read") as pool:
        for chunk in batched(((lid, ledger_path(root, lid, layout)) for lid in ids), READ_CHUNK):
            pending.append(pool.submit(read, chunk))
            if len(pending) > READ_AHEAD:
                yield from rows(pending.popleft())
        while pending:
            yield from rows(pending.popleft())


def _read_subtrees(store_spec: StoreSpec, root: str, layout: LedgerLayout,
                   subtrees: Iterable[Subtree]) -> Iterator[tuple]:
    """One task: its own client, its subtrees walked and read."""
    with store_spec.open() as store:
        for subtree in subtrees:
            ids = iter_ledger_ids(_OneSubtree(store, root, subtree), root, layout)
            yield from _ledger_rows(store, root, layout, ids)


def bk_ledgers(spark: SparkSession, store: StoreSpec, root: str = "/ledgers",
               min_partitions: int | None = None) -> DataFrame:
    """Every ledger znode under ``root`` (BK_LEDGERS), one task per subtree of the layout.

    ``min_partitions`` (default: four per task slot) is how many subtrees the
    layout is split into at least, when it has that many."""
    with store.open() as client:
        try:
            layout = read_layout(client, root)
        except FormatError as e:
            raise InventoryError(f"BookKeeper ledger layout: {e} (check --bookkeeper-metadata-store and "
                                 "bookkeeperLedgersRootPath)") from e
        subtrees = ledger_subtrees(client, root, layout, min_partitions or 4 * spark.sparkContext.defaultParallelism)
    if not subtrees:
        return kept(spark.createDataFrame([], BK_LEDGERS))
    rdd = spark.sparkContext.parallelize(subtrees, len(subtrees)).mapPartitions(
        partial(_read_subtrees, store, root, layout))
    return table(spark, rdd, BK_LEDGERS)
