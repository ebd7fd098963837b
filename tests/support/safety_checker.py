"""An independent judge of deletion safety: it reads the stores itself and never asks the product.

The delete phase decides "still referenced?" with ``delete_phase/storage/gather.py``
and ``references.py``; a checker that called those would share their bugs.
So this module walks the metadata tree on its own (``/managed-ledgers`` four
levels down, cursors under each managed ledger, ``/schemas`` three levels
down), walks BookKeeper's ledger tree by listing children (a ledger *is* its
znode), lists the offload bucket, and computes its own reference set from the
DESIGN's "What references a ledger".  It borrows only the wire codecs of
``metastore.formats`` (decoding bytes is not a decision) and the store's
``get``/``children`` calls; in particular it never imports
``deletion_service.protocol.references``: the compacted and delayed-bucket rules
below are spelled here again from the design.

The kinds it knows: listed (and offloaded) ledgers, cursor ledgers, schema
locator entries, the compacted-topic ledger (property ``CompactedTopicLedger``
of the ``__compaction`` cursor), *every* compacted ledger of a topic whose
``__compaction`` cursor keeps its state in a cursor ledger (the node may name an
older one than the truth: BookKeeper's custom metadata ``component=compacted-ledger``,
``pulsar/compactedTopic`` says which ledgers those are), and PIP-195 bucket
snapshot ledgers (a cursor's ``cursorProperties`` entry
``#pulsar.internal.delayed.bucket_<start>_<end>``, value the ledger id).

Reading order is the whole trick for observing a live system: existing
ledgers and objects are read **before** the references.  Ledgers only ever
leave a list (nothing re-lists them), so a ledger that is referenced at the
later read was referenced at the earlier one too; if its znode was already
gone then, a referenced ledger had been deleted.  Reading the other way round
would report ledgers that trim removed and the daemon deleted in between.
A ledger created after the BookKeeper read would look missing, so callers
pass the ids they had created before taking the snapshot (``known``).
"""

from __future__ import annotations

import re
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from metastore.formats import (
    FormatError,
    decode_cursor,
    decode_ledger_metadata,
    decode_managed_ledger,
    decode_schema_locator,
)
from metastore.interface import MetadataStore

T = TypeVar("T")

#: Children of the ledgers root that are BookKeeper's own, never ledgers (DESIGN, "Storage contract").
BOOKKEEPER_RESERVED = frozenset({"idgen", "idgen-long", "available", "cookies", "LAYOUT", "INSTANCEID",
                                 "underreplication"})
COMPACTION_CURSOR = "__compaction"
COMPACTED_LEDGER_PROPERTY = "CompactedTopicLedger"
#: PIP-195: a cursor property with this prefix names a delayed-delivery bucket's snapshot ledger.
DELAYED_BUCKET_PREFIX = "#pulsar.internal.delayed.bucket_"
_LEAF = re.compile(r"L([0-9]{4})")
_DIGITS = re.compile(r"[0-9]+")
_INT64_MASK = (1 << 64) - 1


@dataclass(frozen=True)
class Violation:
    """One broken invariant, worded for a failure message: which rule, which ledger, what was seen."""

    invariant: str
    ledger_id: int | None
    detail: str

    def __str__(self) -> str:
        where = f"ledger {self.ledger_id}" if self.ledger_id is not None else "-"
        return f"[{self.invariant}] {where}: {self.detail}"


@dataclass
class Snapshot:
    """What the stores held, read in the safe order (ledgers, then objects, then references)."""

    bookkeeper: frozenset[int]  # ledger ids whose znode exists
    objects: frozenset[str]  # offload bucket keys
    references: dict[int, list[str]]  # ledger id -> every reason it is referenced
    listed: dict[str, list[int]]  # managed-ledger path -> its ledger list
    offload_keys: dict[int, tuple[str, ...]]  # listed offloaded ledger -> the objects its copy is made of
    unreadable: list[str] = field(default_factory=list)  # metadata nodes that did not decode
    taken_at: float = 0.0

    def listed_ids(self) -> set[int]:
        return {lid for ids in self.listed.values() for lid in ids}


def java_uuid_text(msb: int, lsb: int) -> str:
    """``new java.util.UUID(msb, lsb).toString()`` for signed halves, written here on purpose
    (not imported from ``offloaders``) so a naming bug there cannot hide from this checker."""
    return str(uuid.UUID(int=((msb & _INT64_MASK) << 64) | (lsb & _INT64_MASK)))


def topic_of_managed_ledger_path(path: str) -> str:
    """``/managed-ledgers/t/ns/persistent/my+topic`` -> ``persistent://t/ns/my topic`` (the local name is
    URL-encoded as Java's ``URLEncoder`` does: ``+`` for a space), spelled here, not imported."""
    tenant, namespace, domain, local = path.removeprefix("/managed-ledgers/").split("/", 3)
    return f"{domain}://{tenant}/{namespace}/{urllib.parse.unquote_plus(local)}"


def offloaded_object_keys(ledger_id: int, msb: int, lsb: int) -> tuple[str, str]:
    """Per-ledger offload objects (DESIGN, "Offloaded objects"): data and index."""
    u = java_uuid_text(msb, lsb)
    return (f"{u}-ledger-{ledger_id}", f"{u}-ledger-{ledger_id}-index")


class SafetyChecker:
    """Reads a cluster's metadata, BookKeeper tree and offload bucket; judges the safety invariants."""

    def __init__(self, store: MetadataStore, bookkeeper_store: MetadataStore, ledgers_root: str = "/ledgers",
                 list_objects: Callable[[], Iterable[str]] | None = None) -> None:
        self.spent: dict[str, float] = {"bookkeeper": 0.0, "objects": 0.0, "references": 0.0}
        self.store = store
        self.bk_store = bookkeeper_store
        self.ledgers_root = ledgers_root.rstrip("/")
        self.list_objects = list_objects
        self._pool = ThreadPoolExecutor(8, thread_name_prefix="safety-checker")
        self._paths: dict[int, str] = {}  # ledger id -> its znode, as last listed
        #: ledger id -> the topic a compacted ledger's custom metadata names (None: not a compacted
        #: ledger).  Read once, the first time a ledger is listed: custom metadata never changes.
        self._compacted_topic: dict[int, str | None] = {}
        self._kinds_lock = threading.Lock()  # the observer and the quiet checks take snapshots at once

    # ---- reading

    def bookkeeper_ledgers(self) -> set[int]:
        """Every ledger znode under the root, found by listing (both hierarchical layouts: the
        zero-padded id is the concatenation of the path's digit groups)."""
        found: set[int] = set()
        stack = [(self.ledgers_root, "")]
        while stack:
            path, digits = stack.pop()
            for name in self.bk_store.children(path):
                if not digits and name in BOOKKEEPER_RESERVED:
                    continue
                leaf = _LEAF.fullmatch(name)
                if leaf is not None:
                    found.add(lid := int(digits + leaf.group(1)))
                    with self._kinds_lock:
                        self._paths[lid] = f"{path}/{name}"
                elif _DIGITS.fullmatch(name):
                    stack.append((f"{path}/{name}", digits + name))
        return found

    def learn_kinds(self, ledger_ids: Iterable[int]) -> None:
        """Read the custom metadata of ledgers not seen before: which are compacted ledgers, of which topic.
        A ledger gone before it was read stays unknown (and is read again if it is listed again)."""
        with self._kinds_lock:
            paths = {lid: self._paths[lid] for lid in ledger_ids
                     if lid not in self._compacted_topic and lid in self._paths}
        nodes = self.bk_store.get_many(list(paths.values())) if paths else {}
        learned: dict[int, str | None] = {}
        for lid, path in paths.items():
            node = nodes.get(path)
            if node is None:
                continue
            try:
                custom = decode_ledger_metadata(node.data).custom_metadata
            except FormatError:
                learned[lid] = None
                continue
            text = {k: v.decode("utf-8", "replace") for k, v in custom.items()}
            compacted = (text.get("application") == "pulsar" and text.get("component") == "compacted-ledger")
            learned[lid] = text.get("pulsar/compactedTopic") if compacted else None
        with self._kinds_lock:
            self._compacted_topic.update(learned)

    def compacted_ledgers(self) -> dict[int, str]:
        """Compacted ledgers seen so far -> the topic their custom metadata names."""
        with self._kinds_lock:
            return {lid: topic for lid, topic in self._compacted_topic.items() if topic is not None}

    def references(self) -> tuple[dict[int, list[str]], dict[str, list[int]], dict[int, tuple[str, ...]], list[str]]:
        """(references, ledger lists, offloaded objects of listed ledgers, unreadable nodes)."""
        refs: dict[int, list[str]] = {}
        listed: dict[str, list[int]] = {}
        offload: dict[int, tuple[str, ...]] = {}
        unreadable: list[str] = []

        def add(ledger_id: int, why: str) -> None:
            refs.setdefault(ledger_id, []).append(why)

        def decoded(path: str, data: bytes, decode: Callable[[bytes], T]) -> T | None:
            """The node decoded, or None with the node noted as unreadable (it may hide references)."""
            try:
                return decode(data)
            except FormatError as e:
                unreadable.append(f"{path}: {e}")
                return None

        ml_paths = self._descend("/managed-ledgers", 4)  # tenant / namespace / domain / topic
        ml_nodes = self.store.get_many(ml_paths)
        present = [p for p in ml_paths if ml_nodes[p] is not None]
        cursor_paths = [f"{p}/{c}" for p, names in zip(present, self._pool.map(self.store.children, present),
                                                         strict=True) for c in names]
        cursor_nodes = self.store.get_many(cursor_paths)
        for path in ml_paths:
            node = ml_nodes[path]
            ml = None if node is None else decoded(path, node.data, decode_managed_ledger)
            if ml is None:
                continue
            listed[path] = [lg.ledger_id for lg in ml.ledgers]
            for lg in ml.ledgers:
                add(lg.ledger_id, f"listed in {path}")
                ctx = lg.offload_context
                if ctx is not None and ctx.complete and ctx.uid_msb is not None and ctx.uid_lsb is not None:
                    offload[lg.ledger_id] = offloaded_object_keys(lg.ledger_id, ctx.uid_msb, ctx.uid_lsb)
        hidden: set[str] = set()  # topics whose __compaction cursor keeps its state in a cursor ledger
        for path, node in cursor_nodes.items():
            cursor = None if node is None else decoded(path, node.data, decode_cursor)
            if cursor is None:
                continue
            if cursor.cursors_ledger_id != -1:
                add(cursor.cursors_ledger_id, f"cursor ledger of {path}")
            ml_path, name = path.rsplit("/", 1)
            if name == COMPACTION_CURSOR:
                if COMPACTED_LEDGER_PROPERTY in cursor.properties:
                    add(cursor.properties[COMPACTED_LEDGER_PROPERTY], f"compacted-topic ledger of {path}")
                if cursor.cursors_ledger_id != -1:
                    hidden.add(topic_of_managed_ledger_path(ml_path))
            for key, value in sorted(cursor.cursor_properties.items()):
                if not key.startswith(DELAYED_BUCKET_PREFIX):
                    continue
                if _DIGITS.fullmatch(value) is None:
                    unreadable.append(f"{path}: bucket property {key!r} = {value[:40]!r} names no ledger")
                    continue
                add(int(value), f"delayed-delivery bucket {key} of {path}")
        for lid, topic in sorted(self.compacted_ledgers().items()):
            if topic in hidden:
                add(lid, f"compacted ledger of {topic}, whose {COMPACTION_CURSOR} cursor keeps its state in a "
                         "cursor ledger (the node may name an older one)")
        schema_paths = self._descend("/schemas", 3)  # tenant / namespace / topic
        for path, node in self.store.get_many(schema_paths).items():
            locator = None if node is None or not node.data else decoded(path, node.data, decode_schema_locator)
            if locator is None:
                continue
            for ledger_id in dict.fromkeys(e.position.ledger_id for e in [locator.info, *locator.index]):
                add(ledger_id, f"schema locator {path}")
        return refs, listed, offload, unreadable

    def snapshot(self) -> Snapshot:
        """Ledgers first, objects second, references last (see the module docstring for why)."""
        taken_at = t0 = time.time()
        bookkeeper = frozenset(self.bookkeeper_ledgers())
        self.learn_kinds(bookkeeper)
        t1 = time.time()
        objects = frozenset(self.list_objects()) if self.list_objects is not None else frozenset()
        t2 = time.time()
        refs, listed, offload, unreadable = self.references()
        self.spent["bookkeeper"] += t1 - t0
        self.spent["objects"] += t2 - t1
        self.spent["references"] += time.time() - t2
        return Snapshot(bookkeeper, objects, refs, listed, offload, unreadable, taken_at)

    def _descend(self, root: str, depth: int) -> list[str]:
        """The nodes ``depth`` levels below ``root``; each level's listings run in parallel (a
        snapshot's cost is round trips, and a cheaper snapshot means more observations)."""
        level = [root]
        for _ in range(depth):
            level = [f"{p}/{c}" for p, names in zip(level, self._pool.map(self.store.children, level), strict=True)
                     for c in names]
        return level

    def close(self) -> None:
        self._pool.shutdown()

    # ---- judging

    @staticmethod
    def referenced_present(snap: Snapshot, known_bookkeeper: Iterable[int],
                           known_objects: Iterable[str] = ()) -> list[Violation]:
        """Invariant 1, observable at any moment: a referenced ledger's znode (and its listed
        offloaded objects) exist.  Only ids created before the snapshot are judged."""
        out = []
        known = set(known_bookkeeper)
        for lid in sorted(set(snap.references) & known - snap.bookkeeper):
            out.append(Violation("1:referenced-ledger-deleted", lid,
                                 f"znode gone while referenced ({'; '.join(snap.references[lid])})"))
        known_keys = set(known_objects)
        for lid, keys in sorted(snap.offload_keys.items()):
            missing = [k for k in keys if k in known_keys and k not in snap.objects]
            if missing:
                out.append(Violation("1:referenced-offload-deleted", lid,
                                     f"offloaded object(s) {missing} gone while the ledger is listed"))
        out += [Violation("metadata-unreadable", None, u) for u in snap.unreadable]
        return out

    @staticmethod
    def deleted_only_what_left(snap: Snapshot, created_bookkeeper: Iterable[int], trimmed: Iterable[int],
                               unlisted_on_purpose: Iterable[int],
                               created_objects: Mapping[int, Iterable[str]] | None = None) -> list[Violation]:
        """Invariant 1, strong form, at a moment no trim is running: every ledger gone from
        BookKeeper (or the bucket) left its list through a successful trim, or was created
        unlisted on purpose.  ``created_objects`` maps an offloaded ledger to its object keys."""
        allowed = set(trimmed) | set(unlisted_on_purpose)
        out = []
        for lid in sorted(set(created_bookkeeper) - snap.bookkeeper - allowed):
            out.append(Violation("1:deleted-but-never-trimmed", lid,
                                 "znode deleted although no successful trim removed the ledger from its list"))
        for lid, keys in sorted((created_objects or {}).items()):
            gone = [k for k in keys if k not in snap.objects]
            if gone and lid not in allowed:
                out.append(Violation("1:offload-deleted-but-never-trimmed", lid,
                                     f"offloaded object(s) {gone} deleted although the ledger was never trimmed"))
        return out

    @staticmethod
    def trim_reports_match(snap: Snapshot, ever_listed: Iterable[int], trimmed: Iterable[int]) -> list[Violation]:
        """What left the lists is exactly what trims reported as removed (the test adds ledgers,
        only trim removes them): a trim that wrote more or less than it said would break the
        bookkeeping both invariants rest on."""
        left = set(ever_listed) - snap.listed_ids()
        trimmed = set(trimmed)
        out = [Violation("trim-report", lid, "left its list, but no trim reported removing it")
               for lid in sorted(left - trimmed)]
        out += [Violation("trim-report", lid, "a trim reported it removed, but it is still listed")
                for lid in sorted(trimmed - left)]
        return out

    @staticmethod
    def no_leak(snap: Snapshot, trimmed: Iterable[int], created_objects: Mapping[int, Iterable[str]] | None = None,
                also_deleted: Iterable[int] = ()) -> list[Violation]:
        """Invariant 2, after a drain: every ledger a trim removed from its list is gone from
        BookKeeper and from the bucket (else it is an orphan nobody will ever ask to delete)."""
        out = []
        for lid in sorted((set(trimmed) | set(also_deleted)) & snap.bookkeeper):
            out.append(Violation("2:leak", lid, "left its list (or was asked to be deleted as an orphan) but its "
                                                "znode is still there after the drain"))
        for lid in sorted(set(trimmed)):
            left = [k for k in (created_objects or {}).get(lid, ()) if k in snap.objects]
            if left:
                out.append(Violation("2:offload-leak", lid, f"trimmed but offloaded object(s) {left} remain"))
        return out
