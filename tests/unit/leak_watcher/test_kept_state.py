"""What the leak watcher keeps for a successor: written and read back whole, in chunks a ZooKeeper
node takes, refused when damaged, and never written over a successor's (embedded SQLite store)."""

from __future__ import annotations

import base64
import json
import random
import zlib
from pathlib import Path

import pytest

from deletion_service.leak_watcher import persisted
from deletion_service.leak_watcher.persisted import StateUnreadable, WatcherState, decode_state, encode_state
from deletion_service.leak_watcher.sightings import OwnedLedger, Reading, TopicSightings
from deletion_service.mark_phase.enqueue import single_request
from deletion_service.protocol.request import LedgerComponent
from metastore import open_store
from metastore.formats import LedgerInfo, OffloadContext
from metastore.formats.managed_ledger import encode_ledger_info
from metastore.interface import BadVersionError, MetadataStore, NodeExistsError

TOPIC = "persistent://t/ns/orders"


def _state(topics: int = 1) -> WatcherState:
    seen = {}
    for n in range(topics):
        topic = f"{TOPIC}-{n}" if n else TOPIC
        listed = {1 + 10 * n: LedgerInfo(1 + 10 * n, entries=5, size=100, timestamp=7),
                  2 + 10 * n: LedgerInfo(2 + 10 * n, offload_context=OffloadContext(
                      uid_msb=3, uid_lsb=4, complete=True, driver_name="aws-s3",
                      driver_metadata={"bucket": "b", "region": "r"}))}
        owned = (OwnedLedger(5 + 10 * n, LedgerComponent.MANAGED_CURSOR, cursor="sub"),
                 OwnedLedger(6 + 10 * n, LedgerComponent.SCHEMA_STORAGE, schema_id="t/ns/orders"))
        seen[topic] = TopicSightings(topic, listed, owned, frozenset({(2 + 10 * n, "uuid-a")}))
    waiting = ((1_700_000_000.5, single_request(TOPIC, 99)),)
    return WatcherState(Reading(seen), waiting)


def test_a_state_reads_back_as_it_was_written() -> None:
    state = _state()
    back = decode_state(encode_state(state))
    assert back.reading.topics == state.reading.topics
    assert [(since, r.wire()) for since, r in back.waiting] == [(since, r.wire()) for since, r in state.waiting]


@pytest.mark.parametrize("damage", [b"", b"not zlib", b"x\x9c\x03\x00\x00\x00\x00\x01"])
def test_a_damaged_state_is_refused_not_half_used(damage: bytes) -> None:
    with pytest.raises(StateUnreadable):
        decode_state(damage)


def _store(tmp_path: Path) -> MetadataStore:
    return open_store(f"sqlite:///{tmp_path / 'metadata.db'}")


def test_a_saved_state_loads_in_the_next_watcher_and_the_old_generation_is_removed(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        assert persisted.load(store).state is None
        first = persisted.save(store, _state(), persisted.load(store))
        second = persisted.save(store, _state(2), first)
        loaded = persisted.load(store)
        assert loaded.state is not None and set(loaded.state.reading.topics) == {TOPIC, f"{TOPIC}-1"}
        assert (loaded.generation, loaded.version, loaded.folder) == (second.generation, second.version, second.folder)
        assert second.folder is not None
        assert store.children(persisted.ROOT) == ["state", second.folder.rsplit("/", 1)[1]]


def test_a_state_larger_than_a_node_is_kept_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(persisted, "CHUNK_BYTES", 1024)
    state = _state(300)
    with _store(tmp_path) as store:
        saved = persisted.save(store, state, persisted.load(store))
        assert saved.folder is not None and len(store.children(saved.folder)) > 3
        loaded = persisted.load(store).state
        assert loaded is not None and loaded.reading.topics == state.reading.topics


def test_a_missing_or_altered_chunk_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(persisted, "CHUNK_BYTES", 1024)
    with _store(tmp_path) as store:
        saved = persisted.save(store, _state(300), persisted.load(store))
        folder = saved.folder
        assert folder is not None
        chunks = store.children(folder)
        victim = f"{folder}/{random.Random(7).choice(chunks)}"
        node = store.get(victim)
        assert node is not None
        store.put(victim, bytes(reversed(node.data)), node.version)
        with pytest.raises(StateUnreadable, match="digest"):
            persisted.load(store)
        store.delete(victim, persisted.ANY)
        with pytest.raises(StateUnreadable, match="missing"):
            persisted.load(store)


def test_a_watcher_that_lost_the_role_cannot_write_over_its_successors_state(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        nothing_yet = persisted.load(store)
        persisted.save(store, _state(3), nothing_yet)
        with pytest.raises(NodeExistsError):  # both started from nothing: the second is refused
            persisted.save(store, _state(), nothing_yet)
        both_loaded = persisted.load(store)
        persisted.save(store, _state(2), both_loaded)  # the successor saves first
        with pytest.raises(BadVersionError):
            persisted.save(store, _state(), both_loaded)  # the old holder's save is refused
        loaded = persisted.load(store).state
        assert loaded is not None and len(loaded.reading.topics) == 2
        assert len(store.children(persisted.ROOT)) == 2  # the pointer and the successor's folder: no leftovers


def test_a_kept_state_that_would_inflate_past_the_limit_or_names_absurd_chunks_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with _store(tmp_path) as store:
        persisted.save(store, _state(50), persisted.load(store))
        monkeypatch.setattr(persisted, "MAX_STATE_BYTES", 1024)  # the state inflates past it
        with pytest.raises(StateUnreadable, match="inflates"):
            persisted.load(store)
        monkeypatch.undo()
        node = store.get(persisted.POINTER)
        assert node is not None
        store.put(persisted.POINTER, json.dumps({**json.loads(node.data), "chunks": 10**9}).encode(), node.version)
        with pytest.raises(StateUnreadable, match="chunks"):
            persisted.load(store)


def test_a_save_sweeps_the_folders_older_saves_left_and_none_a_later_one_writes(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        first = persisted.save(store, _state(), persisted.load(store))
        store.put(f"{persisted.ROOT}/state-1-deadbeef0000/000000", b"half a save", persisted.ABSENT)  # died half-way
        store.put(f"{persisted.ROOT}/state-3-cafecafe0000/000000", b"in progress", persisted.ABSENT)  # a later one
        second = persisted.save(store, _state(2), first)
        assert second.folder is not None and first.folder is not None
        assert sorted(store.children(persisted.ROOT)) == sorted(
            ["state", second.folder.rsplit("/", 1)[1], "state-3-cafecafe0000"])


def _doc(state: WatcherState, listed_entry) -> dict:
    return {"format": persisted.FORMAT,
            "topics": {t: {"l": [listed_entry(info) for info in s.listed.values()],
                           "o": [[o.ledger_id, o.component.value, o.cursor, o.schema_id] for o in s.owned],
                           "p": sorted([lid, uuid] for lid, uuid in s.parts)}
                       for t, s in sorted(state.reading.topics.items())},
            "waiting": [[since, r.wire()] for since, r in state.waiting]}


def _b64(info: LedgerInfo) -> str:
    return base64.b64encode(encode_ledger_info(info)).decode()


def test_a_state_is_the_json_of_its_document_byte_for_byte() -> None:
    """Each topic's member is written by hand (a ledger without an offload context as its id): the
    bytes are those of ``json.dumps`` of the whole document, so an unchanged state keeps its digest."""
    topics = dict(_state(3).reading.topics)
    odd = f'{TOPIC}-é"x\\'
    topics[odd] = TopicSightings(odd, {78: LedgerInfo(78)}, (), frozenset({(78, 'u"1')}))
    state = WatcherState(Reading(topics), _state().waiting)
    doc = _doc(state, lambda info: _b64(info) if info.offload_context is not None else info.ledger_id)
    assert encode_state(state) == zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), 6)
    assert decode_state(encode_state(state)).reading.topics == topics


def test_a_state_kept_by_the_previous_format_reads_the_same() -> None:
    """Format 1 kept every listed ledger as its encoded ``LedgerInfo``: a successor of an older
    watcher reads it as written, so no departure waiting out the settle delay is lost."""
    state = _state(3)
    doc = _doc(state, _b64) | {"format": 1}
    back = decode_state(zlib.compress(json.dumps(doc).encode()))
    assert back.reading.topics == state.reading.topics
    assert [r.wire() for _, r in back.waiting] == [r.wire() for _, r in state.waiting]


@pytest.mark.parametrize("entry", [True, 1.5, None, [1]])
def test_a_listed_ledger_kept_as_anything_else_refuses_the_state(entry: object) -> None:
    doc = _doc(_state(), _b64)
    next(iter(doc["topics"].values()))["l"].append(entry)
    with pytest.raises(StateUnreadable):
        decode_state(zlib.compress(json.dumps(doc).encode()))
