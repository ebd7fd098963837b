"""What the watcher last saw, kept in the metadata store so that a restart or a new leader misses
nothing the store still shows.

A new watcher compares the kept reading with a fresh one: whatever departed meanwhile departs
then, and every departure still waiting out the settle delay is kept with the time it was first
seen, so the delay is not restarted by a hand-over.  Saving less often than every pass loses
nothing: a ledger that departed after the last save is still in the kept reading and departs again
at the next comparison.  What no reading saw (a ledger created and deleted between two readings,
or before the first) is the scheduled scan's to find.

Layout, under :data:`ROOT`: ``state`` names the folder in use, its chunk count and its digest;
``state-<generation>-<token>/<n>`` are its chunks (zlib-compressed JSON, each under a ZooKeeper
node's size limit).  A save writes its chunks into a folder of its own, then moves ``state`` to
it with a compare-and-set on the version it loaded, then deletes the old folder.  A watcher that
lost the role meanwhile therefore changes nothing its successor reads: its pointer write is
refused and its own folder removed.  A save that dies half-way leaves a folder nobody names.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
import zlib
from dataclasses import dataclass
from typing import Any, Final

from deletion_service.leak_watcher.sightings import Listed, OwnedLedger, Reading, TopicSightings
from deletion_service.protocol.request import LedgerComponent, PendingDeleteLedgerInfo, decode
from metastore.formats import LedgerInfo
from metastore.formats.managed_ledger import decode_ledger_info, encode_ledger_info
from metastore.interface import ABSENT, ANY, MetadataStore, MetadataStoreError, validate_path

ROOT: Final = "/ledger-deletion/leak-watcher"
POINTER: Final = f"{ROOT}/state"
#: Bytes per chunk: well under ZooKeeper's 1 MiB request limit.
CHUNK_BYTES: Final = 512 * 1024
#: A kept state is refused (a fresh reading starts) above these: whoever can write the metadata store
#: could otherwise make every replica that takes the role inflate gigabytes, one after another.
MAX_CHUNKS: Final = 512
MAX_STATE_BYTES: Final = 512 * 1024 * 1024
FORMAT: Final = 2
#: Formats this version reads: format 1 kept every listed ledger as an encoded ``LedgerInfo``, which
#: reads the same (a successor of an older watcher loses nothing of its state).
READS: Final = frozenset({1, 2})


class StateUnreadable(Exception):
    """The kept state exists but cannot be used (corrupt, too large, or written by a newer format)."""


class StateTooLarge(Exception):
    """A state too large to keep (it could not be loaded back): nothing is written."""


@dataclass(frozen=True)
class WatcherState:
    """The last reading, and the departures waiting out the settle delay: (first seen, wall-clock
    seconds; the request a leak of it gets)."""

    reading: Reading
    waiting: tuple[tuple[float, PendingDeleteLedgerInfo], ...] = ()


@dataclass(frozen=True)
class Loaded:
    state: WatcherState | None
    version: int  # of the pointer node; ABSENT when there is none yet
    generation: int
    folder: str | None = None  # of the chunks the pointer names
    digest: str | None = None  # of what they hold: a save of the same state writes nothing


def _listed_json(seen: TopicSightings) -> str:
    """A topic's listed ledgers, in list order: the id of one without an offload context (all a request
    for it names), the encoded ``LedgerInfo`` (base64) of one with it (the context names its parts)."""
    listed = seen.listed
    assert isinstance(listed, Listed)  # TopicSightings.__post_init__
    if not listed.offloaded:
        return ",".join(map(str, listed.ids))
    return ",".join(f'"{base64.b64encode(encode_ledger_info(listed.offloaded[lid])).decode()}"'
                    if lid in listed.offloaded else str(lid) for lid in listed.ids)


_COMPACT: Final = json.JSONEncoder(separators=(",", ":"))


def _member(topic: str, seen: TopicSightings) -> str:
    """One topic's member of the ``topics`` object, as ``json.dumps`` with compact separators writes it."""
    owned = _COMPACT.encode([[o.ledger_id, o.component.value, o.cursor, o.schema_id] for o in seen.owned]) \
        if seen.owned else "[]"
    parts = _COMPACT.encode(sorted([lid, uuid] for lid, uuid in seen.parts)) if seen.parts else "[]"
    return f'{json.dumps(topic)}:{{"l":[{_listed_json(seen)}],"o":{owned},"p":{parts}}}'


def _listed(entries: list[Any]) -> Listed:
    """Kept listed ledgers: an id for a ledger without an offload context, an encoded ``LedgerInfo``
    (base64) for one with it (and for every ledger in format 1)."""
    ids: list[int] = []
    infos: list[LedgerInfo] = []
    for entry in entries:
        if type(entry) is int:
            ids.append(entry)
        elif isinstance(entry, str):
            info = decode_ledger_info(base64.b64decode(entry))
            ids.append(info.ledger_id)
            if info.offload_context is not None:
                infos.append(info)
        else:
            raise ValueError(f"a listed ledger kept as {type(entry).__name__}")
    return Listed.of(ids, infos)


def _sightings(topic: str, doc: dict[str, Any]) -> TopicSightings:
    listed = _listed(doc["l"])
    owned = tuple(OwnedLedger(int(lid), LedgerComponent(comp), cursor, schema)
                  for lid, comp, cursor, schema in doc["o"])
    return TopicSightings(topic, listed, owned, frozenset((int(lid), str(uuid)) for lid, uuid in doc["p"]))


#: The JSON goes to the compressor in pieces of about this many characters.
_FEED_CHARS: Final = 1 << 20


def encode_state(state: WatcherState) -> bytes:
    """The kept form of ``state``: zlib-compressed JSON (topics sorted, so one state is one digest).

    Encoded whole at every save, and cheaply: a ledger without an offload context (nearly all of them)
    is its id, so 100,000 topics of 10 ledgers encode in about a second (format 1 encoded each as a
    ``LedgerInfo``: 7 s, and keeping each topic's encoding between saves to avoid that cost 46 MB).
    The save is part of every leak's wait (a pass saves before it sends: ``role``).  The JSON goes to
    the compressor topic by topic, never whole in memory (20 MB at 100,000 topics)."""
    deflate = zlib.compressobj(6)
    out, pending, size = [], [f'{{"format":{FORMAT},"topics":{{'], 0
    for n, (topic, seen) in enumerate(sorted(state.reading.topics.items())):
        member = _member(topic, seen)
        pending.append(f",{member}" if n else member)
        size += len(member)
        if size >= _FEED_CHARS:
            out.append(deflate.compress("".join(pending).encode()))
            pending, size = [], 0
    waiting = _COMPACT.encode([[since, request.wire()] for since, request in state.waiting])
    pending.append(f'}},"waiting":{waiting}}}')
    out += [deflate.compress("".join(pending).encode()), deflate.flush()]
    return b"".join(out)


def _inflate(data: bytes) -> bytes:
    inflater = zlib.decompressobj()
    out = inflater.decompress(data, MAX_STATE_BYTES)
    if inflater.unconsumed_tail or not inflater.eof:
        raise StateUnreadable(f"inflates past {MAX_STATE_BYTES // (1024 * 1024)} MiB, or is cut short")
    return out


def decode_state(data: bytes) -> WatcherState:
    try:
        doc = json.loads(_inflate(data))
        if doc.get("format") not in READS:
            raise StateUnreadable(f"kept in format {doc.get('format')!r}, this version reads {sorted(READS)}")
        topics = {topic: _sightings(topic, seen) for topic, seen in doc["topics"].items()}
        waiting = tuple((float(since), decode(json.dumps(wire).encode())) for since, wire in doc["waiting"])
    except StateUnreadable:
        raise
    except Exception as e:  # noqa: BLE001 - any flaw in a kept state means: start from a fresh reading
        raise StateUnreadable(f"{type(e).__name__}: {e}") from e
    return WatcherState(Reading(topics), waiting)


def _chunk_path(folder: str, n: int) -> str:
    return f"{folder}/{n:06d}"


def load(store: MetadataStore) -> Loaded:
    """The kept state (None when there is none), and the pointer's version for the next :func:`save`.
    Raises :class:`StateUnreadable` when it is there but cannot be used."""
    pointer = store.get(POINTER)
    if pointer is None:
        return Loaded(None, ABSENT, 0)
    try:
        meta = json.loads(pointer.data)
        generation, chunks, digest = int(meta["generation"]), int(meta["chunks"]), str(meta["sha256"])
        folder = f"{ROOT}/{meta['folder']}"
        validate_path(folder)
    except (ValueError, KeyError, TypeError) as e:
        raise StateUnreadable(f"{POINTER}: {e}") from e
    if not 0 < chunks <= MAX_CHUNKS:
        raise StateUnreadable(f"{POINTER} names {chunks} chunks (at most {MAX_CHUNKS} are read)")
    nodes = store.get_many([_chunk_path(folder, n) for n in range(chunks)])
    if any(node is None for node in nodes.values()):
        raise StateUnreadable(f"generation {generation} is missing chunks")
    data = b"".join(node.data for node in nodes.values() if node is not None)
    if hashlib.sha256(data).hexdigest() != digest:
        raise StateUnreadable(f"generation {generation} does not match its digest")
    return Loaded(decode_state(data), pointer.version, generation, folder, digest)


def save(store: MetadataStore, state: WatcherState, loaded: Loaded) -> Loaded:
    """Write ``state`` as the generation after ``loaded``'s; the new :class:`Loaded` for the next save
    (``loaded`` itself when ``state`` is what it holds already: nothing is written).
    Raises :class:`~metastore.interface.BadVersionError` (or ``NodeExistsError``) when another watcher saved since."""
    data = encode_state(state)
    digest = hashlib.sha256(data).hexdigest()
    if digest == loaded.digest:
        return loaded
    generation = loaded.generation + 1
    name = f"state-{generation}-{uuid.uuid4().hex[:12]}"
    folder = f"{ROOT}/{name}"
    chunks = [data[i:i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)] or [b""]
    if len(chunks) > MAX_CHUNKS:
        raise StateTooLarge(f"{len(data)} bytes compressed, over {MAX_CHUNKS} chunks of {CHUNK_BYTES}")
    pointer = json.dumps({"generation": generation, "folder": name, "chunks": len(chunks), "sha256": digest}).encode()
    try:
        for n, chunk in enumerate(chunks):
            store.put(_chunk_path(folder, n), chunk, ABSENT)
        version = store.put(POINTER, pointer, loaded.version)
    except MetadataStoreError:
        _forget(store, folder)
        raise
    _forget_older(store, generation)
    return Loaded(state, version, generation, folder, digest)


def replacing_unreadable(store: MetadataStore) -> Loaded:
    """Where to save after a kept state that could not be used: over its pointer, and a generation past
    every folder there, so the next save sweeps them all."""
    pointer = store.get(POINTER)
    newest = max((g for name in store.children(ROOT) if (g := _generation_of(name)) is not None), default=0)
    return Loaded(None, pointer.version if pointer is not None else ABSENT, newest)


def _generation_of(name: str) -> int | None:
    """The generation of a chunk folder's name (``state-<generation>-<token>``); None for any other node."""
    parts = name.split("-")
    return int(parts[1]) if len(parts) == 3 and parts[0] == "state" and parts[1].isdigit() else None


def _forget_older(store: MetadataStore, generation: int) -> None:
    """Every folder of an older generation: the one the pointer named before, and any a save that died
    half-way (or lost its compare-and-set) left.  A save in progress elsewhere started from the state
    just replaced at the earliest, so it writes this generation or a later one: never swept here."""
    try:
        names = store.children(ROOT)
    except MetadataStoreError:
        return
    for name in names:
        older = _generation_of(name)
        if older is not None and older < generation:
            _forget(store, f"{ROOT}/{name}")


def _forget(store: MetadataStore, folder: str) -> None:
    """Delete a folder of chunks (best effort: a leftover only costs space)."""
    try:
        for name in store.children(folder):
            store.delete(f"{folder}/{name}", ANY)
        store.delete(folder, ANY)
    except MetadataStoreError:
        pass
