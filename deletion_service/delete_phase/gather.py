"""Gather the facts for a batch of requests: the only delete-phase module that reads storage.

Reads are batched across the whole batch — one pipelined read of every
managed-ledger and schema node, one of every cursor node, one of every
BookKeeper znode — because the daemon's cost is round trips to ZooKeeper, not
bytes.  Failures become facts (``transient``, ``unverifiable``) so the
decision table, not an exception handler, says what happens next.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from deletion_service.delete_phase.facts import BookKeeperFact, Facts, OffloadFact
from deletion_service.delete_phase.references import topic_references
from deletion_service.model import LedgerType, PendingDeleteLedgerInfo
from metastore.formats import (
    FormatError,
    LedgerLayout,
    decode_cursor,
    decode_ledger_metadata,
    decode_managed_ledger,
    decode_schema_locator,
    ledger_path,
    managed_ledger_name,
    managed_ledger_path,
    read_layout,
    schema_id,
    schema_path,
)
from metastore.interface import MetadataStore, MetadataStoreUnavailable, Node
from offloaders.interface import (
    IndexExpectation,
    OffloadIndexMismatchError,
    OffloadNotAllowedError,
    OffloadTarget,
    OffloadTargetError,
    OffloadTransientError,
    Verification,
)
from offloaders.registry import OffloaderSettings, offloader_for

_log = logging.getLogger(__name__)

TRANSIENT = (MetadataStoreUnavailable, OffloadTransientError)


def in_process_retry(attempts: int = 3, max_wait_s: float = 2.0) -> Retrying:
    """Transient errors get a few quick tries before the request is reconsumed later."""
    return Retrying(
        stop=stop_after_attempt(attempts), wait=wait_exponential(multiplier=0.2, max=max_wait_s),
        retry=retry_if_exception_type(TRANSIENT), reraise=True,
    )


@dataclass
class _TopicState:
    references: dict[int, list[str]]
    unverifiable: str | None = None


class FactGatherer:
    def __init__(
        self,
        store: MetadataStore,
        bookkeeper_store: MetadataStore,
        offload: OffloaderSettings,
        ledgers_root: str = "/ledgers",
        clock: Callable[[], float] = time.time,
        retry: Callable[[], Retrying] = in_process_retry,
    ) -> None:
        self.store = store
        self.bk_store = bookkeeper_store
        self.offload = offload
        self.ledgers_root = ledgers_root
        self.clock = clock
        self.retry = retry
        self._layout: LedgerLayout | None = None

    def gather(self, requests: Sequence[PendingDeleteLedgerInfo], attempts: Sequence[int]) -> list[Facts]:
        now_ms = int(self.clock() * 1000)
        try:
            topics = self.retry()(self._read_topics, {r.topic_name for r in requests})
        except TRANSIENT as e:
            return [Facts(now_ms, a, transient=str(e)) for a in attempts]
        needs_bk = [r for r in requests if r.ledger_type == LedgerType.LEDGER]
        bk_facts: dict[int, BookKeeperFact] = {}
        bk_problem: tuple[str, str] | None = None  # (kind, detail)
        if needs_bk:
            try:
                bk_facts = self.retry()(self._read_bookkeeper, {r.ledger_id for r in needs_bk})
            except TRANSIENT as e:
                bk_problem = ("transient", str(e))
            except FormatError as e:
                bk_problem = ("unverifiable", f"BookKeeper ledger layout: {e}")
        out = []
        for request, tries in zip(requests, attempts, strict=True):
            state = topics[request.topic_name]
            refs = tuple(state.references.get(request.ledger_id, ()))
            facts = Facts(now_ms, tries, references=refs, unverifiable=state.unverifiable)
            if request.ledger_type == LedgerType.LEDGER:
                if bk_problem is not None:
                    kind, detail = bk_problem
                    facts = _with(facts, **{kind: detail})
                else:
                    facts = _with(facts, bookkeeper=bk_facts[request.ledger_id])
            elif not refs and state.unverifiable is None:
                try:
                    facts = _with(facts, offload=self.retry()(self._offload_fact, request))
                except TRANSIENT as e:
                    facts = _with(facts, transient=str(e))
            out.append(facts)
        return out

    # ---- the managed ledger, its cursors and its schema

    def _read_topics(self, topics: set[str]) -> dict[str, _TopicState]:
        ml_paths = {t: managed_ledger_path(t) for t in topics}
        schema_paths = {t: schema_path(t) for t in topics}
        nodes = self.store.get_many([*ml_paths.values(), *schema_paths.values()])
        cursor_paths: dict[str, dict[str, str]] = {}
        for topic, path in ml_paths.items():
            if nodes[path] is not None:
                cursor_paths[topic] = {name: f"{path}/{name}" for name in self.store.children(path)}
        cursor_nodes = self.store.get_many([p for names in cursor_paths.values() for p in names.values()])
        return {
            t: _topic_state(t, nodes[ml_paths[t]], nodes[schema_paths[t]],
                            {name: cursor_nodes[p] for name, p in cursor_paths.get(t, {}).items()})
            for t in topics
        }

    # ---- BookKeeper

    def layout(self) -> LedgerLayout:
        if self._layout is None:
            self._layout = read_layout(self.bk_store, self.ledgers_root)
        return self._layout

    def _read_bookkeeper(self, ledger_ids: set[int]) -> dict[int, BookKeeperFact]:
        layout = self.layout()
        paths = {lid: ledger_path(self.ledgers_root, lid, layout) for lid in ledger_ids}
        nodes = self.bk_store.get_many(paths.values())
        return {lid: _bookkeeper_fact(path, nodes[path]) for lid, path in paths.items()}

    # ---- tiered storage

    def _offload_fact(self, request: PendingDeleteLedgerInfo) -> OffloadFact:
        ctx = request.offload_context
        assert ctx is not None, "validated: OFFLOAD_LEDGER requests carry an offload context"
        ml_name = managed_ledger_name(request.topic_name)
        try:
            target = OffloadTarget.from_offload_context(request.ledger_id, ctx.model_dump(by_alias=True), ml_name)
            offloader = offloader_for(target.driver_name, self.offload)
            offloader.check_allowed(target)
        except OffloadNotAllowedError as e:
            return OffloadFact(not_allowed=str(e))
        except (ValueError, OffloadTargetError) as e:
            return OffloadFact(target_error=str(e))
        try:
            heads = [offloader.head(target, name) for name in offloader.object_names(target)]
            present = [h for h in heads if h is not None]
            if not present:
                return OffloadFact(target=target, present=False)
            index = offloader.verify_index_belongs(target, IndexExpectation(managed_ledger_name=ml_name))
        except OffloadIndexMismatchError as e:
            return OffloadFact(target=target, index_mismatch=str(e), present=True)
        except OffloadNotAllowedError as e:
            return OffloadFact(target=target, not_allowed=str(e))
        except OffloadTargetError as e:
            return OffloadFact(target=target, target_error=str(e))
        if index.outcome == Verification.UNVERIFIABLE:
            _log.info("deleting %s without index verification: %s", target.uuid, index.detail)
        stamps = [h.last_modified_ms for h in present if h.last_modified_ms is not None]
        return OffloadFact(target=target, index=index, present=True, oldest_object_ms=min(stamps) if stamps else None)


def _topic_state(topic: str, ml: Node | None, schema: Node | None, cursors: dict[str, Node | None]) -> _TopicState:
    try:
        ml_info = decode_managed_ledger(ml.data) if ml is not None else None
        cursor_infos = {name: decode_cursor(n.data) for name, n in cursors.items() if n is not None}
        locator = decode_schema_locator(schema.data) if schema is not None and schema.data else None
    except FormatError as e:
        # Without every reference we cannot prove a ledger unused: never guess.
        return _TopicState({}, unverifiable=f"metadata of {topic} unreadable: {e}")
    return _TopicState(topic_references(ml_info, cursor_infos, locator, schema_id(topic)))


def _bookkeeper_fact(path: str, node: Node | None) -> BookKeeperFact:
    if node is None:
        return BookKeeperFact(path)
    try:
        meta = decode_ledger_metadata(node.data)
    except FormatError as e:
        return BookKeeperFact(path, unreadable=str(e), version=node.version)
    return BookKeeperFact(path, meta, node.version, node.ctime_ms)


def _with(facts: Facts, **changes: object) -> Facts:
    return replace(facts, **changes)  # type: ignore[arg-type]
