"""Gather the facts for a batch of requests: every read the decision table's verdict rests on.

Only gathering lives here.  What it gathers with lives beside it: the retry
policy (``storage_retry.py``, :mod:`metastore.retry`'s), the pool the offload
reads share with the deleter (``offload_pool.py``), the reading and judging of
an offloaded copy's indexes (``verify_offload_io.py``, ``verify_offload.py``),
and the owners' node paths (``owner_paths.py``).

Reads are batched across the whole batch — one pipelined read of every
BookKeeper znode, one of every managed-ledger and schema node, one of every
cursor node — because the daemon's cost is round trips to ZooKeeper, not
bytes.  Failures become facts (``transient``, ``unverifiable``,
``internal_error``) so the decision table, not an exception handler, says what
happens next; and a failure stays with the request it belongs to: when a
batched read fails for a reason other than a dependency being down, the batch
is read again node by node, so one poisonous name costs one request, not its
batch-mates.

Whose ledger is it?  A request is a claim.  The reference check ("is it still
in use?") reads the owner BookKeeper's own metadata proves — the managed
ledger named by ``pulsar/managed-ledger``, the schema named by
``pulsar/schemaId`` — as well as the one the request names.  So a request that
names an unrelated topic can never make a live ledger look unreferenced.  For
an offloaded copy, the index object proves the owner, and verification
requires it to be the request's own managed ledger.

A cursor is known by its name as Pulsar writes it — its node's name, the subscription URL-encoded
(:func:`metastore.formats.pulsar_cursor_name`) — and a cursor ledger's ``pulsar/cursor`` is that
same string, so the proof that a young cursor ledger was superseded reads the cursor the ledger's
own stamp names, compared as written, never decoded (``a b`` and ``a+b`` are two cursors).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TypeVar, assert_never

from tenacity import Retrying

from deletion_service.delete_phase.offload.pool import in_parallel
from deletion_service.delete_phase.rules.facts import BookKeeperFact, Facts, OffloadFact
from deletion_service.delete_phase.rules.owner_paths import (
    managed_ledger_path_of_name,
    managed_ledger_path_of_topic,
    schema_path_of_id,
    schema_path_of_topic,
    topic_of_path,
)
from deletion_service.delete_phase.rules.verify_offload import IndexExpectation, Verification
from deletion_service.delete_phase.storage.breaker import TargetBreakers, TargetNotAnswering
from deletion_service.delete_phase.storage.offload_cost import beyond_bound
from deletion_service.delete_phase.storage.offload_index import (
    ChargedStorage,
    ListingUnreadable,
    offload_target_keys,
    verify_offloaded_copy,
)
from deletion_service.delete_phase.storage.retry import TRANSIENT, in_process_retry
from deletion_service.protocol.references import (
    LedgerKind,
    TopicMetadata,
    UnreadableReference,
    kind_of,
    offload_superseded,
    superseded,
)
from deletion_service.protocol.request import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from metastore.formats import (
    FormatError,
    LedgerLayout,
    ManagedLedgerInfo,
    decode_cursor,
    decode_ledger_metadata,
    decode_managed_ledger,
    decode_schema_locator,
    ledger_path,
    managed_ledger_name,
    read_layout,
)
from metastore.formats.custom_metadata import COMPACTED_TOPIC_KEY, CURSOR_KEY, MANAGED_LEDGER_KEY, SCHEMA_ID_KEY
from metastore.interface import MetadataStore, Node
from offloaders.interface import OffloadNotAllowedError, OffloadTarget, OffloadTargetError, java_uuid
from offloaders.registry import OffloaderSettings, offloader_for

_log = logging.getLogger(__name__)

T = TypeVar("T")


class ReadFailureKind(StrEnum):
    TRANSIENT = "transient"  # the store did not answer: retry later (``Facts.transient``)
    UNVERIFIABLE = "unverifiable"  # it answered what cannot be read: never deleted (``Facts.unverifiable``)


@dataclass(frozen=True)
class ReadFailure:
    """Why one node could not be read, and which fact that makes of its requests."""

    kind: ReadFailureKind
    detail: str

    def into(self, facts: Facts, context: str) -> Facts:
        match self.kind:
            case ReadFailureKind.TRANSIENT:
                return replace(facts, transient=f"{context}{self.detail}")
            case ReadFailureKind.UNVERIFIABLE:
                return replace(facts, unverifiable=f"{context}{self.detail}")
            case _:
                assert_never(self.kind)


@dataclass
class _Owner:
    """One managed-ledger (with its cursors) or schema node, decoded; or why it cannot be."""

    meta: TopicMetadata
    exists: bool
    unverifiable: str | None = None

    def references(self, request: PendingDeleteLedgerInfo) -> list[str]:
        """Why this owner still reaches the request's data: for a BookKeeper ledger every reference
        to its id (the reference model's); for an offloaded copy every offload context that names
        one of its uuids (any ledger's: a streaming segment holds several)."""
        if request.ledger_type == LedgerType.OFFLOAD_LEDGER:
            uuids = _uuids(request)
            by_uuid = self.meta.offload_references_by_uuid
            return [f"offloaded copy {ref.uuid} is named by the offload context of ledger {ref.ledger_id} "
                    f"of {ref.topic}" for uuid in sorted(uuids) for ref in by_uuid.get(uuid, ())]
        refs = [ref.why for ref in self.meta.references_by_ledger.get(request.ledger_id, ())]
        hidden = self.meta.hidden
        if hidden is not None and request.ledger_component == LedgerComponent.COMPACTED_LEDGER:
            refs.append(hidden)
        return refs


@dataclass(frozen=True)
class _Claims:
    """The metadata nodes whose references decide one request: claimed and proven."""

    managed_ledgers: frozenset[str]  # managed-ledger node paths
    schemas: frozenset[str]  # schema node paths
    #: the node BookKeeper's metadata (or, for an offloaded copy, the verified index) proves is the owner
    proven: str | None = None


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

    def gather(self, requests: Sequence[PendingDeleteLedgerInfo], attempts: Sequence[int],
               grace_since: Sequence[int | None] | None = None) -> list[Facts]:
        now_ms = int(self.clock() * 1000)
        out = [Facts(now_ms, a, grace_since_ms=g)
               for a, g in zip(attempts, grace_since or [None] * len(attempts), strict=True)]
        ledger_reqs = [i for i, r in enumerate(requests) if r.ledger_type == LedgerType.LEDGER]
        offload_reqs = [i for i, r in enumerate(requests) if r.ledger_type == LedgerType.OFFLOAD_LEDGER]

        # 1. BookKeeper's metadata first: it proves whose ledger each one is (carried beside ``out``
        #    until the last step, which builds each request's facts once: see :func:`_with`).
        bookkeeper: dict[int, BookKeeperFact] = {}
        if ledger_reqs:
            self._gather_bookkeeper(requests, ledger_reqs, out, bookkeeper)
        # 2. The offloaded copies' indexes, each request on its own (one bad target stays its own),
        #    several in flight: an object store answers in milliseconds, each call on its own.
        for i, facts in zip(offload_reqs, in_parallel(
                [(lambda i=i: self._gather_offload(requests[i], out[i])) for i in offload_reqs]), strict=True):
            out[i] = facts
        # 3. The references of every owner, claimed or proven, in one batched read.
        claimed: dict[tuple[str, ...], _Claims] = {}  # a batch names few topics and owners many times over
        claims = [_claims_of(r, f, bookkeeper.get(i), claimed)
                  for i, (r, f) in enumerate(zip(requests, out, strict=True))]
        owners, problem = self._read_owners(claims)
        for i, (request, claim) in enumerate(zip(requests, claims, strict=True)):
            bk = bookkeeper.get(i)
            if problem is not None:
                out[i] = _with(out[i], bookkeeper=bk, transient=problem)
                continue
            refs: list[str] = []
            unverifiable = out[i].unverifiable
            for path in sorted(claim.managed_ledgers | claim.schemas):
                owner = owners[path]
                try:
                    refs += owner.references(request) if owner.unverifiable is None else []
                except UnreadableReference as e:
                    owner.unverifiable = str(e)
                unverifiable = unverifiable or owner.unverifiable
            proof = None
            if not refs and unverifiable is None and claim.proven is not None:
                proof = _superseded(request, bk, owners[claim.proven])
            out[i] = _with(out[i], bookkeeper=bk, references=tuple(dict.fromkeys(refs)), unverifiable=unverifiable,
                           superseded=proof)
        return out

    # ---- BookKeeper

    def layout(self) -> LedgerLayout:
        if self._layout is None:
            self._layout = read_layout(self.bk_store, self.ledgers_root)
        return self._layout

    def _gather_bookkeeper(self, requests: Sequence[PendingDeleteLedgerInfo], idx: list[int],
                           out: list[Facts], bookkeeper: dict[int, BookKeeperFact]) -> None:
        """Each request's ledger node into ``bookkeeper`` (by index), or why it cannot be read into ``out``."""
        try:
            layout = self.retry()(self.layout)
            paths = {requests[i].ledger_id: ledger_path(self.ledgers_root, requests[i].ledger_id, layout)
                     for i in idx}
        except TRANSIENT as e:
            for i in idx:
                out[i] = replace(out[i], transient=str(e))
            return
        except FormatError as e:
            for i in idx:
                out[i] = replace(out[i], unverifiable=f"BookKeeper ledger layout: {e}")
            return
        nodes, failed = self._get_nodes(self.bk_store, paths.values())
        for i in idx:
            path = paths[requests[i].ledger_id]
            if path in failed:
                out[i] = failed[path].into(out[i], f"reading {path}: ")
            else:
                bookkeeper[i] = _bookkeeper_fact(path, nodes[path])

    # ---- tiered storage

    def _gather_offload(self, request: PendingDeleteLedgerInfo, facts: Facts) -> Facts:
        too_many = beyond_bound(request)  # before any storage call: such a request costs none
        if too_many is not None:
            return replace(facts, invalid=too_many)
        try:
            gate = self.target_breakers.gate(offload_target_keys(request))  # once, before any try
            if gate is not None:
                raise TargetNotAnswering(gate)
            return replace(facts, offload=self.retry()(self._offload_fact, request))
        except (*TRANSIENT, TargetNotAnswering) as e:
            return replace(facts, transient=str(e))
        except Exception as e:  # noqa: BLE001 - a bug or a surprise from one target stays with its request
            _log.exception("unexpected error verifying the offloaded copy of %s", request.describe())
            return replace(facts, internal_error=f"verifying the offloaded copy: {type(e).__name__}: {e}")

    @functools.cached_property
    def target_breakers(self) -> TargetBreakers:
        """One breaker per offload target, shared with the offload lane (``delete_phase.offload.lane``)."""
        return TargetBreakers()

    def managed_ledger_listing(self, ml_name: str) -> ManagedLedgerInfo | None:
        """The list of managed ledger ``ml_name`` as stored now (None: the node does not exist), read
        for a shared streaming segment: is each ledger it holds still listed, still naming it?
        Raises ``MetadataStoreUnavailable`` (retried) or :class:`ListingUnreadable`."""
        try:
            path = managed_ledger_path_of_name(ml_name)
        except ValueError as e:
            raise ListingUnreadable(f"{ml_name!r} names no managed ledger: {e}") from e
        node = self.store.get(path)
        if node is None:
            return None
        try:
            return decode_managed_ledger(node.data)
        except Exception as e:  # noqa: BLE001 - FormatError, or any decoder surprise on stored bytes
            raise ListingUnreadable(f"managed ledger {path} unreadable: {e}") from e

    def _offload_fact(self, request: PendingDeleteLedgerInfo) -> OffloadFact:
        ctx = request.offload_context
        assert ctx is not None, "validated: OFFLOAD_LEDGER requests carry an offload context"
        ml_name = managed_ledger_name(request.topic_name)
        try:
            target = OffloadTarget.from_offload_context(request.ledger_id, ctx.model_dump(by_alias=True), ml_name)
            offloader = offloader_for(target.driver_name, self.offload)
            offloader.check_allowed(target)  # every location it names: the context's and each segment's
        except OffloadNotAllowedError as e:
            return OffloadFact(not_allowed=str(e))
        except (ValueError, OffloadTargetError) as e:
            return OffloadFact(target_error=str(e))
        storage = ChargedStorage(offloader, target, self.target_breakers)
        try:
            heads = storage.stat_objects(offloader.object_names(target))
            present = [h for h in heads.values() if h is not None]
            if not present:  # absent where each part was written (each segment at its own location)
                return OffloadFact(target=target, present=False)
            index = verify_offloaded_copy(storage, target, IndexExpectation(managed_ledger_name=ml_name),
                                          listed=self.managed_ledger_listing)
        except OffloadNotAllowedError as e:
            return OffloadFact(target=target, not_allowed=str(e))
        except OffloadTargetError as e:
            return OffloadFact(target=target, target_error=str(e))
        except ListingUnreadable as e:
            return OffloadFact(target=target, present=True, unverifiable=str(e))
        if index.outcome is Verification.MISMATCH:
            return OffloadFact(target=target, index_mismatch=index.detail, present=True)
        if index.outcome is Verification.HELD:
            return OffloadFact(target=target, present=True, held_by=index.detail)
        stamps = [h.last_modified_ms for h in present if h.last_modified_ms is not None]
        oldest = min(stamps) if stamps else None
        if index.outcome != Verification.VERIFIED:
            return OffloadFact(target=target, present=True, unverifiable=index.detail, oldest_object_ms=oldest)
        if index.owner != ml_name:  # verification compares with ml_name; this is the invariant, checked
            return OffloadFact(target=target, present=True, oldest_object_ms=oldest,
                               index_mismatch=f"objects belong to {index.owner!r}, not {ml_name!r}")
        return OffloadFact(target=target, present=True, verified=index.detail, oldest_object_ms=oldest)

    # ---- the owners: managed ledgers (with their cursors) and schemas

    def _read_owners(self, claims: Sequence[_Claims]) -> tuple[dict[str, _Owner], str | None]:
        """Every claimed node's references; or, when the metadata store is down, why.

        A sync first: absence proves a ledger superseded (a managed ledger is written before its
        first ledger), so the owners must be read as of after BookKeeper's nodes were, not from
        a ZooKeeper server that has not yet seen the broker's latest writes."""
        try:
            self.retry()(self.store.sync)
        except TRANSIENT as e:
            return {}, str(e)
        ml_paths = sorted({p for c in claims for p in c.managed_ledgers})
        schema_paths = sorted({p for c in claims for p in c.schemas})
        nodes, failed = self._get_nodes(self.store, [*ml_paths, *schema_paths])
        listed = [p for p in ml_paths if p not in failed and nodes[p] is not None]
        names, list_failed = self._per_node(self.store.children_many, self.store.children, listed, "listing cursors: ")
        failed.update(list_failed)
        cursor_paths = {path: [f"{path}/{name}" for name in names[path]] for path in listed if path in names}
        cursor_nodes, cursor_failed = self._get_nodes(self.store, [p for ps in cursor_paths.values() for p in ps])
        transient = next((f.detail for f in (*failed.values(), *cursor_failed.values())
                          if f.kind == ReadFailureKind.TRANSIENT), None)
        if transient is not None:
            return {}, transient
        owners: dict[str, _Owner] = {}
        for path in ml_paths:
            bad = failed.get(path) or next((cursor_failed[p] for p in cursor_paths.get(path, ())
                                            if p in cursor_failed), None)
            if bad is not None:
                owners[path] = _Owner(TopicMetadata(path), True, unverifiable=f"metadata at {path}: {bad.detail}")
                continue
            cursors = {p.rsplit("/", 1)[1]: cursor_nodes[p] for p in cursor_paths.get(path, ())}
            owners[path] = _managed_ledger_owner(path, nodes[path], cursors)
        for path in schema_paths:
            if path in failed:
                owners[path] = _Owner(TopicMetadata(path), True,
                                      unverifiable=f"metadata at {path}: {failed[path].detail}")
            else:
                owners[path] = _schema_owner(path, nodes[path])
        return owners, None

    # ---- reading nodes, with errors kept per node

    def _get_nodes(self, store: MetadataStore, paths: Iterable[str]
                   ) -> tuple[dict[str, Node | None], dict[str, ReadFailure]]:
        """Pipelined reads of ``paths`` (see :meth:`_per_node`)."""
        return self._per_node(store.get_many, store.get, paths)

    def _per_node(self, many: Callable[[list[str]], dict[str, T]], one: Callable[[str], T], paths: Iterable[str],
                  what: str = "") -> tuple[dict[str, T], dict[str, ReadFailure]]:
        """``many`` for all paths at once; on a non-transient failure, ``one`` path by path, so the
        failure stays with its node.

        Returns the answers and, per failed path, its :class:`ReadFailure`."""
        paths = list(dict.fromkeys(paths))
        if not paths:
            return {}, {}
        try:
            return self.retry()(many, paths), {}
        except TRANSIENT as e:
            return {}, dict.fromkeys(paths, ReadFailure(ReadFailureKind.TRANSIENT, str(e)))
        except Exception:  # noqa: BLE001 - find the node that caused it
            _log.warning("a batched metadata request failed; asking for %d node(s) one by one", len(paths))
        answers: dict[str, T] = {}
        failed: dict[str, ReadFailure] = {}
        for path in paths:
            try:
                answers[path] = self.retry()(one, path)
            except TRANSIENT as e:
                failed[path] = ReadFailure(ReadFailureKind.TRANSIENT, str(e))
            except Exception as e:  # noqa: BLE001 - e.g. a path the store refuses: this node's requests only
                failed[path] = ReadFailure(ReadFailureKind.UNVERIFIABLE, f"{what}{type(e).__name__}: {e}")
        return answers, failed

def _claims_of(request: PendingDeleteLedgerInfo, facts: Facts, bk: BookKeeperFact | None,
               claimed: dict[tuple[str, ...], _Claims]) -> _Claims:
    """:func:`_claims`, once per distinct (topic, what BookKeeper's metadata names) in ``claimed``."""
    if bk is None or bk.metadata is None:
        return _claims(request, facts, bk)
    texts = bk.metadata.custom_texts
    key = (request.topic_name, kind_of(bk.metadata).value, texts.get(MANAGED_LEDGER_KEY) or "",
           texts.get(SCHEMA_ID_KEY) or "", texts.get(COMPACTED_TOPIC_KEY) or "")
    found = claimed.get(key)
    if found is None:
        found = claimed[key] = _claims(request, facts, bk)
    return found


def _claims(request: PendingDeleteLedgerInfo, facts: Facts, bk: BookKeeperFact | None) -> _Claims:
    """The request's own topic, plus whatever BookKeeper's metadata says owns the ledger."""
    mls = {managed_ledger_path_of_topic(request.topic_name)}
    schemas = {schema_path_of_topic(request.topic_name)}
    proven: str | None = None
    if bk is not None and bk.metadata is not None:
        kind = kind_of(bk.metadata)
        # Not a well-formed name: nothing to read, and the mismatch row refuses the request.
        with contextlib.suppress(ValueError):
            if proven_ml := bk.metadata.custom_text(MANAGED_LEDGER_KEY):
                mls.add(path := managed_ledger_path_of_name(proven_ml))
                proven = path if kind is not LedgerKind.SCHEMA else proven
        with contextlib.suppress(ValueError):
            if proven_schema := bk.metadata.custom_text(SCHEMA_ID_KEY):
                schemas.add(path := schema_path_of_id(proven_schema))
                proven = path if kind is LedgerKind.SCHEMA else proven
        with contextlib.suppress(ValueError):
            if compacted := bk.metadata.custom_text(COMPACTED_TOPIC_KEY):
                mls.add(path := managed_ledger_path_of_topic(compacted))
                proven = path if kind is LedgerKind.COMPACTED else proven
    elif facts.offload is not None and facts.offload.verified is not None:
        proven = managed_ledger_path_of_topic(request.topic_name)  # the index names the request's own topic
    return _Claims(frozenset(mls), frozenset(schemas), proven)


def _managed_ledger_owner(path: str, ml: Node | None, cursors: dict[str, Node | None]) -> _Owner:
    topic = topic_of_path(path)
    try:
        ml_info = decode_managed_ledger(ml.data) if ml is not None else None
        # keyed by node name: the cursor's name, which ``pulsar/cursor`` repeats (never decoded, see pulsar_cursor_name)
        cursor_infos = {name: decode_cursor(n.data) for name, n in cursors.items() if n is not None}
    except Exception as e:  # noqa: BLE001 - FormatError, or any decoder surprise on stored bytes
        # Without every reference we cannot prove a ledger unused: never guess.
        return _Owner(TopicMetadata(topic), True, unverifiable=f"metadata at {path} unreadable: {e}")
    return _Owner(TopicMetadata(topic, ml_info, cursor_infos), exists=ml is not None)


def _schema_owner(path: str, node: Node | None) -> _Owner:
    schema = path.removeprefix("/schemas/")
    try:
        locator = decode_schema_locator(node.data) if node is not None and node.data else None
    except Exception as e:  # noqa: BLE001 - FormatError, or any decoder surprise on stored bytes
        return _Owner(TopicMetadata(schema), True, unverifiable=f"schema at {path} unreadable: {e}")
    return _Owner(TopicMetadata(schema, schema=locator, schema_id=schema), exists=node is not None)


def _superseded(request: PendingDeleteLedgerInfo, bk: BookKeeperFact | None, owner: _Owner) -> str | None:
    """The proof (reference model) that the request's unreferenced data can never be referenced
    again, read from the owner BookKeeper's metadata or the verified index names."""
    if owner.unverifiable is not None:
        return None
    if request.ledger_type == LedgerType.LEDGER:
        if bk is None or bk.metadata is None:
            return None
        return superseded(kind_of(bk.metadata), request.ledger_id, owner.meta,
                          cursor=bk.metadata.custom_text(CURSOR_KEY), owner_exists=owner.exists)
    return offload_superseded(request.ledger_id, _uuids(request), owner.meta, owner_exists=owner.exists)


def _uuids(request: PendingDeleteLedgerInfo) -> frozenset[str]:
    """The uuids whose objects an offload request would delete (its context's and its segments')."""
    ctx = request.offload_context
    if ctx is None:
        return frozenset()
    return frozenset(java_uuid(u.uid_msb, u.uid_lsb) for u in (ctx, *ctx.segments) if u.uid_msb or u.uid_lsb)


def _bookkeeper_fact(path: str, node: Node | None) -> BookKeeperFact:
    if node is None:
        return BookKeeperFact(path)
    try:
        meta = decode_ledger_metadata(node.data)
    except FormatError as e:
        return BookKeeperFact(path, unreadable=str(e), version=node.version)
    except Exception as e:  # noqa: BLE001 - bytes anyone can write: any decoder surprise is "unreadable"
        return BookKeeperFact(path, unreadable=f"{type(e).__name__}: {e}", version=node.version)
    return BookKeeperFact(path, meta, node.version, node.ctime_ms)


def _with(facts: Facts, **changes: object) -> Facts:
    """``dataclasses.replace`` without its walk over the fields (it was a fifth of gathering's own
    time, called twice a request); every field is carried, and ``Facts`` refuses a name it lacks."""
    return Facts(**{**facts.__dict__, **changes})
