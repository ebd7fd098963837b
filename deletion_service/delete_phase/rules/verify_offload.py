"""Does an offloaded copy's index prove it is the request's ledger of the request's topic? Pure.

The offloaders read the index objects and report what they say
(:class:`offloaders.interface.IndexFacts`); this module judges those facts, as
``verify.py`` judges BookKeeper's metadata.  Anyone who can publish to the
system topic can name any UUID, so an offloaded copy is deleted only when its
objects name the request's managed ledger:

* a per-ledger index (and a filesystem MapFile) embeds the source ledger's
  BookKeeper metadata, which names the managed ledger but not the ledger id;
  entries, size or ctime agreeing prove nothing about whose data it is;
* a streaming segment's index names its ledger ids but not their topic; only
  upstream's ``ManagedLedgerName`` object metadata does.

A contradiction is a MISMATCH (acked, never deleted, never retried); anything
that proves nothing is UNVERIFIABLE, and unverifiable is never deleted.

A streaming segment may hold several ledgers (of one managed ledger).  It is
deleted exactly when the last of them leaves that managed ledger's list — never
before, never left behind: :func:`judge_shared_segment` reads the list of the
managed ledger the *segment's objects* name (not the request's topic) and
answers HELD while any other ledger the index names is still listed, or any
listed ledger's offload context still names the segment.  HELD is "still in
use": the holder's own request deletes the segment once the holder leaves, and
the requests of the ledgers that left before it find it absent.  The list only
ever loses ledgers (ids grow), so a segment once released stays released.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from metastore.formats import ManagedLedgerInfo
from metastore.formats.custom_metadata import (
    APPLICATION_KEY,
    APPLICATION_PULSAR,
    MANAGED_LEDGER_KEY,
    MANAGED_LEDGER_NAME_FIELD,
)
from offloaders.index_format import SegmentLedgerInfo, SourceLedgerMetadata
from offloaders.interface import IndexFacts, IndexKind, IndexState, java_uuid


class Verification(StrEnum):
    #: The objects name the expected managed ledger (and agree with every other expectation).
    VERIFIED = "verified"
    #: Nothing proves whose data this is (index missing, undecodable, or naming no
    #: managed ledger): the delete phase never deletes it, an operator decides.
    UNVERIFIABLE = "unverifiable"
    #: Neither index nor data exists: nothing to verify, nothing to delete.
    ABSENT = "absent"
    #: The index contradicts the request (another ledger, another topic, or not an
    #: offload index at all): acked without deleting, counted ``metadata_mismatch``.
    MISMATCH = "mismatch"
    #: A streaming segment that a ledger still listed in its managed ledger holds: in use.
    HELD = "held"


@dataclass(frozen=True, slots=True)
class IndexExpectation:
    """What the caller knows about the ledger, to compare with the index.

    Every field is optional; only those given (and present in the index) are
    compared.  ``entries``/``size`` come from the managed ledger's ``LedgerInfo``
    (upstream sets ``size`` to BookKeeper's ledger length, ``entries`` to
    lastEntryId + 1); ``ctime_ms`` from BookKeeper metadata if it still exists.
    """

    managed_ledger_name: str | None = None
    entries: int | None = None
    size: int | None = None
    ctime_ms: int | None = None
    #: A streaming segment may hold several ledgers; deleting it for one ledger
    #: destroys the others' data.  Refused unless the caller says all of them go.
    allow_shared_segment_ledgers: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class IndexCheck:
    outcome: Verification
    detail: str
    #: Names of the index objects that were read.
    checked: tuple[str, ...] = ()
    #: The managed ledger the objects prove they belong to (VERIFIED only).
    owner: str | None = None


def judge_index(facts: IndexFacts, ledger_id: int, expect: IndexExpectation | None = None,
                managed_ledger_name: str | None = None) -> IndexCheck:
    """One index object's facts -> its verdict for ``ledger_id``.

    ``managed_ledger_name`` is the target's (the request's topic); where the
    objects' location names one (the filesystem layout), that one is expected
    instead, as the objects were found under it."""
    name = (facts.ref.index_name,)
    if facts.state is IndexState.ABSENT:
        return IndexCheck(Verification.ABSENT, facts.detail, name)
    if facts.state in (IndexState.INDEX_MISSING, IndexState.UNDECODED):
        return IndexCheck(Verification.UNVERIFIABLE, facts.detail, name)
    if facts.state is IndexState.MALFORMED:
        return IndexCheck(Verification.MISMATCH, facts.detail, name)
    fallback = facts.location_ml_name or managed_ledger_name
    if facts.ref.kind is IndexKind.SEGMENT:
        return judge_segment(facts.ledgers, ledger_id, facts.ref.index_name, expect, facts.object_ml_name, fallback)
    if facts.source is None:
        return IndexCheck(Verification.UNVERIFIABLE, f"{facts.ref.index_name}: read, but no metadata in it", name)
    return judge_source_metadata(facts.source, ledger_id, facts.ref.index_name, expect, fallback,
                                 facts.object_ml_name)


def judge_source_metadata(meta: SourceLedgerMetadata, ledger_id: int, name: str,
                          expect: IndexExpectation | None, fallback_ml_name: str | None,
                          object_ml_name: str | None = None) -> IndexCheck:
    """Compare a per-ledger index's embedded metadata with what the caller expects.

    Any contradiction is a MISMATCH.  VERIFIED needs the managed ledger the index
    names (its embedded ``pulsar/managed-ledger``, else the ``ManagedLedgerName``
    user metadata upstream stamps on the objects) to equal the expected one:
    entries, size or ctime agreeing prove nothing about whose data this is.  An
    index that names no managed ledger is UNVERIFIABLE."""
    expect = expect or IndexExpectation()
    want_ml = expect.managed_ledger_name or fallback_ml_name
    have_ml = meta.managed_ledger_name or object_ml_name
    compared, problems = _compare_source(meta, expect, want_ml, have_ml, object_ml_name)
    if problems:
        return IndexCheck(Verification.MISMATCH,
                          f"{name} is not the index of ledger {ledger_id}: " + "; ".join(problems), (name,))
    if "managed-ledger" in compared:
        return IndexCheck(Verification.VERIFIED, f"{name}: matched {', '.join(compared)}", (name,), owner=have_ml)
    why = (f"names no managed ledger (no {MANAGED_LEDGER_KEY}, no {MANAGED_LEDGER_NAME_FIELD} metadata)"
           if have_ml is None else "nothing to compare its managed ledger with")
    return IndexCheck(Verification.UNVERIFIABLE, f"{name}: valid offload index, but it {why}", (name,))


def _compare_source(meta: SourceLedgerMetadata, expect: IndexExpectation, want_ml: str | None,
                    have_ml: str | None, object_ml_name: str | None) -> tuple[list[str], list[str]]:
    """(what could be compared, what disagreed) between an embedded metadata and the expectation."""
    compared: list[str] = []
    problems: list[str] = []
    if meta.managed_ledger_name and object_ml_name and meta.managed_ledger_name != object_ml_name:
        problems.append(f"index names {meta.managed_ledger_name!r} but its object metadata {object_ml_name!r}")
    if want_ml is not None and have_ml is not None:
        compared.append("managed-ledger")
        if have_ml != want_ml:
            problems.append(f"managed ledger {have_ml!r} != expected {want_ml!r}")
    app = meta.custom.get(APPLICATION_KEY)
    if app is not None and app != APPLICATION_PULSAR.encode():
        problems.append(f"source ledger application={app.decode('utf-8', 'replace')!r}, not pulsar")
    if expect.entries is not None and meta.last_entry_id is not None:
        compared.append("entries")
        if meta.last_entry_id != expect.entries - 1:
            problems.append(f"lastEntryId {meta.last_entry_id} != expected entries-1 ({expect.entries - 1})")
    if expect.size is not None and meta.length is not None and meta.length > 0:
        compared.append("size")
        if meta.length != expect.size:
            problems.append(f"length {meta.length} != expected size {expect.size}")
    if expect.ctime_ms is not None and meta.ctime_ms:
        compared.append("ctime")
        if meta.ctime_ms != expect.ctime_ms:
            problems.append(f"ctime {meta.ctime_ms} != expected {expect.ctime_ms}")
    return compared, problems


def judge_segment(ledgers: Mapping[int, SegmentLedgerInfo], ledger_id: int, name: str,
                  expect: IndexExpectation | None, owner_ml_name: str | None = None,
                  fallback_ml_name: str | None = None) -> IndexCheck:
    """Check a streaming index names ``ledger_id`` and no ledger we were not told may go.

    A streaming index records ledger ids, not the topic: "holds ledger L" alone
    would let a request naming any topic delete another topic's segment.  The
    topic is proven only by the ``ManagedLedgerName`` user metadata upstream
    writes on the segment's objects (``owner_ml_name``); without it the segment
    is UNVERIFIABLE."""
    expect = expect or IndexExpectation()
    if ledger_id not in ledgers:
        return IndexCheck(Verification.MISMATCH,
                          f"{name} does not hold ledger {ledger_id} (it holds {sorted(ledgers)})", (name,))
    others = set(ledgers) - {ledger_id} - set(expect.allow_shared_segment_ledgers)
    if others:
        return IndexCheck(Verification.MISMATCH,
                          f"{name} also holds ledgers {sorted(others)}; deleting it would delete their data", (name,))
    info = ledgers[ledger_id]
    if expect.entries is not None and info.entries is not None and info.entries != expect.entries:
        return IndexCheck(Verification.MISMATCH, f"{name}: ledger {ledger_id} has {info.entries} entries, "
                          f"expected {expect.entries}", (name,))
    want_ml = expect.managed_ledger_name or fallback_ml_name
    if owner_ml_name is None or want_ml is None:
        return IndexCheck(Verification.UNVERIFIABLE, f"{name}: holds ledger {ledger_id}, but nothing names its "
                          f"topic (no {MANAGED_LEDGER_NAME_FIELD} metadata on the segment)", (name,))
    if owner_ml_name != want_ml:
        return IndexCheck(Verification.MISMATCH,
                          f"{name} belongs to managed ledger {owner_ml_name!r}, not {want_ml!r}", (name,))
    return IndexCheck(Verification.VERIFIED, f"{name}: holds ledger {ledger_id} of {owner_ml_name}", (name,),
                      owner=owner_ml_name)


def segment_holders(segment_uuid: str, index_ledgers: Iterable[int], ledger_id: int,
                    listed: ManagedLedgerInfo | None) -> tuple[int, ...]:
    """The ledgers of ``listed`` (the managed ledger a segment's objects name; None: it no longer
    exists) that still hold the segment: every ledger besides ``ledger_id`` that its index names and
    the list still holds, and every listed ledger whose offload context names the segment."""
    if listed is None:
        return ()
    others = set(index_ledgers) - {ledger_id}
    holders = []
    for ledger in listed.ledgers:
        ctx = ledger.offload_context
        names_it = ctx is not None and any(
            (seg.uid_msb or seg.uid_lsb) and java_uuid(seg.uid_msb or 0, seg.uid_lsb or 0) == segment_uuid
            for seg in ctx.segments)
        if ledger.ledger_id in others or names_it:
            holders.append(ledger.ledger_id)
    return tuple(sorted(holders))


def judge_shared_segment(facts: IndexFacts, ledger_id: int, expect: IndexExpectation | None,
                         listed: Callable[[str], ManagedLedgerInfo | None],
                         managed_ledger_name: str | None = None) -> IndexCheck:
    """A segment index's verdict when the segment may hold other ledgers too.

    First the usual checks, as if every other ledger may go (it holds the request's ledger, its
    objects name the expected managed ledger); then, only if that VERIFIED, ``listed(owner)`` — the
    list of the managed ledger the objects name — decides: HELD while a ledger there still holds
    the segment (:func:`segment_holders`), else VERIFIED.  ``listed`` is the caller's read (it may
    raise for storage trouble); a segment holding the request's ledger alone needs no read."""
    others = frozenset(facts.ledgers) - {ledger_id}
    if facts.ref.kind is not IndexKind.SEGMENT or facts.state is not IndexState.READ or not others:
        return judge_index(facts, ledger_id, expect, managed_ledger_name)
    base = expect or IndexExpectation()
    widened = IndexExpectation(base.managed_ledger_name, base.entries, base.size, base.ctime_ms,
                               base.allow_shared_segment_ledgers | others)
    check = judge_index(facts, ledger_id, widened, managed_ledger_name)
    if check.outcome is not Verification.VERIFIED or check.owner is None:
        return check
    segment_uuid = facts.ref.data_name
    holders = segment_holders(segment_uuid, facts.ledgers, ledger_id, listed(check.owner))
    if holders:
        return IndexCheck(Verification.HELD, f"segment {segment_uuid} also holds ledger(s) {sorted(others)}; "
                          f"{check.owner} still lists ledger(s) {list(holders)} holding it: it is deleted with the "
                          "last of them", check.checked, owner=check.owner)
    return IndexCheck(Verification.VERIFIED, f"{check.detail}; its other ledgers {sorted(others)} are gone from "
                      f"{check.owner}'s list", check.checked, owner=check.owner)


def combine(checks: Sequence[IndexCheck]) -> IndexCheck:
    """Several indexes (per-ledger + segments) -> one verdict.

    The first mismatch wins, then a held segment (in use: nothing is deleted);
    any unverifiable part makes the whole unverifiable; all absent is absent;
    and the parts must name one managed ledger, or deleting them would delete
    some other topic's data."""
    if not checks:
        return IndexCheck(Verification.UNVERIFIABLE, "no index object to check")
    mismatch = next((c for c in checks if c.outcome is Verification.MISMATCH), None)
    if mismatch is not None:
        return mismatch
    held = next((c for c in checks if c.outcome is Verification.HELD), None)
    if held is not None:
        return held
    names = tuple(n for c in checks for n in c.checked)
    detail = "; ".join(c.detail for c in checks)
    present = [c for c in checks if c.outcome is not Verification.ABSENT]
    if not present:
        return IndexCheck(Verification.ABSENT, detail, names)
    if any(c.outcome is Verification.UNVERIFIABLE for c in present):
        return IndexCheck(Verification.UNVERIFIABLE, detail, names)
    owners = {c.owner for c in present}
    if len(owners) != 1:
        return IndexCheck(Verification.MISMATCH,
                          f"the objects name different managed ledgers: {sorted(map(str, owners))}", names)
    return IndexCheck(Verification.VERIFIED, detail, names, owner=owners.pop())
