"""``trim``: the mark phase for one managed ledger, with one atomic metadata write.

Order matters and is the whole point of PIP-186:

1. read the managed ledger and every cursor (remembering their versions);
2. pick ledgers wholly consumed; send one request per (ledger, storage), all
   of the topic's in one pipelined batch, and wait for every receipt;
3. list the cursors again and abort if the set changed (see "New cursors");
4. in ONE multi-op: check every cursor node is still at the version read in
   step 1, and CAS-put the managed-ledger node without the receipted ids.

A crash after 2 leaves requests for ledgers still listed: phase two acks them
as still in use.

Slow sends. A daemon that finds a trim request's ledger still listed waits
out its in-use grace (``twoPhaseDeletionInUseGraceSeconds``, counted from when
*it* first saw the request, on its own clock) and then acks it as in use.  If
the write of step 4 landed after that, the ledger would leave the list with no
request left to delete it: an orphan.  So trim times steps 2–3 on its own
monotonic clock (no other host's clock is involved) and writes only if they
took less than half the grace (``write_within_s``); otherwise it aborts with
nothing removed, exactly like a cursor change.  First sight is never before the
send began, so a write inside half the grace lands well inside every daemon's
window, whatever their clocks say.  A cursor reset between 1 and 4 (its node version moved)
fails the multi-op and nothing is forgotten: a rewound cursor can never point
into a deleted ledger.  A failed send keeps its ledger listed, and so does a
ledger with a copy no request can name (see ``pick.requests_for``).

Pipelining changes none of this: the batch sender answers per request (a
receipt or why not), a ledger counts as receipted only when every one of its
requests was (BookKeeper and offloaded copy), and the write waits until the
whole batch has answered.  Requests of a failed ledger that did get through
find it still listed, exactly as after a crash.

New cursors. The multi-op checks the cursors read in step 1, but a cursor
*created* since (at Earliest, say) is a node the multi does not know. So right
before the write (step 3) trim lists the managed ledger's children again and
aborts if the set differs from step 1's (nothing removed; the sent requests
find their ledgers still listed). What is left: a cursor created between that
re-list and the multi's commit. A ZooKeeper multi can check a node's data
version but not its children (creating a child moves only the parent's
cversion), so this window — one metadata round trip, milliseconds — cannot be
closed from here. It is bounded in practice: trim edits only topics no broker
serves, and a broker that loads the topic to create a subscription first opens
the managed ledger, which rolls a new ledger and rewrites the managed-ledger
node, so the CAS-put of step 4 fails; what remains is a tool writing a cursor
znode directly, in those milliseconds, on a topic the operator declared
offline.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tenacity import Retrying

from deletion_service.broker.interface import BrokerError
from deletion_service.errors import UserError
from deletion_service.failpoints import failpoint
from deletion_service.mark_phase import pick
from deletion_service.protocol.request import PendingDeleteLedgerInfo
from metastore.formats import (
    FormatError,
    ManagedCursorInfo,
    ManagedLedgerInfo,
    decode_cursor,
    decode_managed_ledger,
    encode_managed_ledger,
    managed_ledger_path,
    namespace_ownership_prefix,
    parse_topic,
)
from metastore.formats.node_reader import MissingNodeError, read_decoded
from metastore.interface import (
    BadVersionError,
    CheckVersion,
    MetadataStore,
    MetadataStoreError,
    MetadataStoreUnavailable,
    MultiOpError,
    Node,
    NotSentError,
    Op,
    Put,
)
from metastore.retry import read_retry

_log = logging.getLogger(__name__)

#: The share of the in-use grace trim may spend between its first send and its write.
WRITE_BUDGET = 0.5

#: Sends a batch of requests; returns, in order, each one's receipt (message id) or why it failed.
BatchSend = Callable[[Sequence[PendingDeleteLedgerInfo]], list[str | BrokerError]]

@dataclass(frozen=True)
class KeptLedger:
    """A picked ledger trim left in the list because one of its copies could not be announced."""

    ledger_id: int
    why: str


@dataclass
class TrimResult:
    topic: str
    picked: list[int] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)
    metadata_writes: int = 0
    aborted: str | None = None
    not_sent: list[int] = field(default_factory=list)  # send failed: kept in the list
    kept: list[KeptLedger] = field(default_factory=list)  # picked, but a copy has no request: kept in the list
    note: str | None = None

    def to_json(self) -> dict:
        return {"topic": self.topic, "picked": self.picked, "removed": self.removed,
                "metadataWrites": self.metadata_writes, "aborted": self.aborted,
                "kept": [{"ledgerId": k.ledger_id, "why": k.why} for k in self.kept]}


class TrimRefused(UserError):
    """The topic is not ours to edit (a broker owns it, or a cursor's state is in BookKeeper)."""


def trim(
    store: MetadataStore,
    topic: str,
    send: BatchSend,
    offline: bool = False,
    dry_run: bool = False,
    clock: Callable[[], float] = time.time,
    progress: Callable[[int, int], None] | None = None,
    offload_fallback: pick.OffloadLocation | None = None,
    retry: Callable[[], Retrying] = read_retry,
    write_within_s: float | None = None,
    monotonic: Callable[[], float] = time.monotonic,
) -> TrimResult:
    """``send`` gets all of the topic's requests at once (``RequestPublisher.send_requests``
    pipelines them; :func:`one_at_a_time` adapts a single-request sender) and answers each.

    ``offload_fallback``: the cluster's offload settings, for offloaded ledgers whose context
    names no driver; without it such ledgers stay listed (``TrimResult.kept`` says why).

    ``retry`` wraps every read (the store tries once), so a brief reconnect is
    ridden out; the one write is never retried (see :func:`_read_state`): when its reply is lost,
    the node is read back to tell whether it was applied (:func:`_write_landed`).

    ``write_within_s``: the daemons' in-use grace (``None`` or 0: switched off); the write is
    skipped unless the sends took less than :data:`WRITE_BUDGET` of it (see "Slow sends")."""
    try:
        name = str(parse_topic(topic))
    except (FormatError, ValueError) as e:
        raise UserError(f"invalid topic {topic!r}: {e}") from e
    if not offline:
        _refuse_if_owned(store, name, retry)
    ml_path = managed_ledger_path(name)
    ml, ml_node, cursor_nodes, cursors = _read_state(store, name, ml_path, retry)
    cursors_read = set(cursors)
    in_ledger = sorted(n for n, c in cursors.items() if not c.state_in_metadata_store)
    if in_ledger:
        raise TrimRefused(
            f"cursor(s) {', '.join(in_ledger)} of {name} keep their state in a BookKeeper cursor ledger, which "
            "this tool cannot read; trim it from a broker, or let the broker persist it to the metadata store")

    picked = pick.pick(ml, cursors)
    result = TrimResult(name, [lg.ledger_id for lg in picked.ledgers], note=picked.why_none)
    now_ms = int(clock() * 1000)
    announced = []
    for ledger in picked.ledgers:
        announcement = pick.requests_for(name, ledger, now_ms, offload_fallback)
        if announcement.keep_because is None:
            announced.append((ledger.ledger_id, announcement.requests))
            continue
        _log.info("ledger %d of %s stays listed: %s", ledger.ledger_id, name, announcement.keep_because)
        result.kept.append(KeptLedger(ledger.ledger_id, announcement.keep_because))
    if dry_run or not announced:
        return result

    sending_since = monotonic()
    receipted = _send_all(name, announced, send, result, progress)
    failpoint("trim.after-receipts")
    if not receipted:
        return result

    changed = _cursor_set_change(cursors_read, set(retry()(store.children, ml_path)))
    if changed:
        result.aborted = (f"the cursors of {name} changed since they were read ({changed}); nothing removed: "
                          "phase two will find the sent ledgers still in use; run trim again")
        return result
    took_s = monotonic() - sending_since
    if write_within_s and took_s >= write_within_s * WRITE_BUDGET:
        result.aborted = (f"sending took {took_s:.1f}s, {WRITE_BUDGET:.0%} or more of the in-use grace "
                          f"({write_within_s:g}s): a daemon may already have acked a request as in use, and "
                          "writing now could orphan its ledger; nothing removed: run trim again (a faster broker, "
                          "or a longer twoPhaseDeletionInUseGraceSeconds)")
        return result
    result.metadata_writes = 1
    result.aborted = _forget(store, name, ml_path, ml, ml_node, cursor_nodes, receipted, retry)
    if result.aborted is not None:
        return result
    failpoint("trim.after-write")
    result.removed = sorted(receipted)
    return result


def _forget(store: MetadataStore, name: str, ml_path: str, ml: ManagedLedgerInfo, ml_node: Node,
            cursor_nodes: dict[str, Node | None], receipted: set[int], retry: Callable[[], Retrying]) -> str | None:
    """Step 4, the one write: ``None`` once the receipted ledgers have left the list, else why not."""
    ops: list[Op] = [CheckVersion(path, node.version) for path, node in cursor_nodes.items() if node is not None]
    written = encode_managed_ledger(pick.without(ml, receipted))
    ops.append(Put(ml_path, written, ml_node.version))
    try:
        store.multi(ops)
    except MultiOpError as e:
        moved = e.op.path if isinstance(e.cause, BadVersionError) else None
        return (f"{moved} changed since it was read" if moved else str(e.cause)) + (
            "; nothing removed: phase two will find the sent ledgers still in use")
    except MetadataStoreUnavailable as e:
        landed = False if isinstance(e, NotSentError) else _write_landed(store, ml_path, ml_node, written, retry)
        if landed is None:
            return (f"{e}; the write's reply was lost and reading the node back cannot tell whether it was "
                    "applied: if it was, phase two deletes the sent ledgers; if not, it finds them still "
                    f"listed. `inspect managed-ledger --topic {name}` shows which")
        if not landed:
            return f"{e}; nothing removed: phase two will find the sent ledgers still in use"
        _log.info("trim of %s: the write's reply was lost, but reading back shows it applied", name)
    return None


def _send_all(name: str, announced: list[tuple[int, list[PendingDeleteLedgerInfo]]], send: BatchSend,
              result: TrimResult, progress: Callable[[int, int], None] | None) -> set[int]:
    """Step 2: every announced request in one batch; the ledgers whose requests were ALL receipted.

    Anything but a message id counts as not receipted, and a sender that raises ``BrokerError``
    fails the whole batch: a ledger leaves the list only on evidence that each of its requests is
    on the topic.  A sender answering for a different number of requests is a bug, and trim stops
    before writing rather than guess which answer belongs to which request."""
    requests = [request for _, ledger_requests in announced for request in ledger_requests]
    if progress is not None:
        progress(0, len(announced))
    try:
        answers: list[str | BrokerError] = send(requests)
    except BrokerError as e:
        answers = [e] * len(requests)
    if len(answers) != len(requests):
        raise RuntimeError(f"the sender answered {len(answers)} times for {len(requests)} requests of {name}; "
                           "nothing removed")
    receipted: set[int] = set()
    position = 0
    for ledger_id, ledger_requests in announced:
        own = answers[position:position + len(ledger_requests)]
        position += len(ledger_requests)
        failures = [a for a in own if not isinstance(a, str)]
        if failures:
            _log.warning("request for ledger %d of %s not sent (%s): it stays listed", ledger_id, name, failures[0])
            result.not_sent.append(ledger_id)
        else:
            receipted.add(ledger_id)
    if progress is not None:
        progress(len(announced), len(announced))
    return receipted


def one_at_a_time(send: Callable[[PendingDeleteLedgerInfo], str]) -> BatchSend:
    """A batch sender from one that sends a single request and waits for its receipt, catching
    ``BrokerError`` per request as the pipelined senders do.  For callers that must act between
    two sends (tests interleaving a daemon or a cursor reset with trim) or have nothing to pipeline."""
    def send_batch(requests: Sequence[PendingDeleteLedgerInfo]) -> list[str | BrokerError]:
        answers: list[str | BrokerError] = []
        for request in requests:
            try:
                answers.append(send(request))
            except BrokerError as e:
                answers.append(e)
        return answers
    return send_batch


def _read_state(store: MetadataStore, name: str, ml_path: str, retry: Callable[[], Retrying]
                ) -> tuple[ManagedLedgerInfo, Node, dict[str, Node | None], dict[str, ManagedCursorInfo]]:
    """Step 1: the managed ledger and every cursor, each node with the version read.

    Reads only, each wrapped in ``retry``: a read is safe to repeat.  The
    multi-op of step 4 is not retried: a write whose reply was lost may have
    been applied, and trim cannot tell from here.
    """
    try:
        ml, ml_node = retry()(read_decoded, store, ml_path, decode_managed_ledger, "managed-ledger")
    except MissingNodeError as e:
        raise UserError(f"no managed ledger for {name} (no node at {e.path})") from e
    except FormatError as e:
        raise UserError(f"cannot trim {name}: {e}") from e
    cursor_paths = [f"{ml_path}/{c}" for c in retry()(store.children, ml_path)]
    cursor_nodes = retry()(store.get_many, cursor_paths)
    cursors = {}
    for path, node in cursor_nodes.items():
        if node is None:
            continue  # deleted since listed: one cursor fewer
        try:
            cursors[path.rsplit("/", 1)[1]] = decode_cursor(node.data)
        except FormatError as e:
            raise UserError(f"cannot decode cursor {path}: {e}; refusing to trim") from e
    return ml, ml_node, cursor_nodes, cursors


def _write_landed(store: MetadataStore, ml_path: str, before: Node, written: bytes,
                  retry: Callable[[], Retrying]) -> bool | None:
    """Whether a multi whose reply was lost was applied: read the managed-ledger node back (as
    kazoo's lock recipe does), never repeat the write.  Applied means exactly one version later
    holding exactly our bytes (the multi is atomic, so its cursor checks passed too); the old
    version means not applied.  ``None``: nobody can tell from here (the read failed too, or
    another writer has moved the node since).  Raises nothing."""
    try:
        node = retry()(store.get, ml_path)
    except MetadataStoreError:
        return None
    if node is not None and node.version == before.version:
        return False
    if node is not None and node.version == before.version + 1 and node.data == written:
        return True
    return None


def _cursor_set_change(read: set[str], now: set[str]) -> str:
    """'' when the same cursors exist; else what changed, for the operator."""
    parts = []
    if now - read:
        parts.append("new: " + ", ".join(sorted(now - read)))
    if read - now:
        parts.append("gone: " + ", ".join(sorted(read - now)))
    return "; ".join(parts)


def _refuse_if_owned(store: MetadataStore, topic: str, retry: Callable[[], Retrying]) -> None:
    """With the ZooKeeper-based load managers, an owned bundle has a znode under
    ``/namespace/<tenant>/<ns>``.  Any owned bundle of the namespace refuses: which
    bundle holds a topic depends on the broker's hash settings, and guessing wrong
    would edit a live broker's metadata."""
    prefix = namespace_ownership_prefix(topic)
    owned = retry()(store.children, prefix)
    if owned:
        shown = ", ".join(owned[:3]) + ("…" if len(owned) > 3 else "")
        raise TrimRefused(
            f"namespace {prefix.removeprefix('/namespace/')} has bundles owned by a broker ({shown}): trim edits "
            "metadata a live broker owns; unload or terminate the topic first, or pass --offline if no broker "
            "serves it")

