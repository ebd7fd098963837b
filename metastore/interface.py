"""The one contract every metadata backend implements.

Pulsar and BookKeeper keep their state in ZooKeeper-shaped stores: a tree of
nodes, each with bytes, a version that moves on every write, and a creation
time.  The deletion protocol leans on two properties of that shape, so they are
part of the contract rather than backend details:

* compare-and-set on the version (the mark phase and the BookKeeper deletion
  both act "at the version we verified", never blindly);
* an atomic multi-op (check versions + puts + deletes, all or nothing), so a
  batch of ledgers leaves a managed ledger's list in one write.

Backends live beside this file (``zookeeper/``, ``sqlite_store.py``);
protocol code only ever sees :class:`MetadataStore`.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, assert_never

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

#: ``expected_version`` for :meth:`MetadataStore.put`: create, fail if the node exists.
ABSENT: Final = -1
#: ``expected_version`` for :meth:`MetadataStore.put`/``delete``: whatever version is there.
ANY: Final = -2

#: ZooKeeper's default ``jute.maxbuffer`` is 1 MiB (1,048,575 bytes) for a whole
#: request; a bigger one makes the server drop the connection, which clients then
#: report as a connection loss rather than a size error.  We keep headroom for
#: the path and request framing.
DEFAULT_MAX_REQUEST_BYTES: Final = 1_048_575 - 8 * 1024
#: Tries of the read that resolves a lost delete reply (waits 0.2, 0.4, 0.8, 1.6 s: a reconnect).
REREAD_ATTEMPTS: Final = 5


@dataclass(frozen=True, slots=True)
class Node:
    """A node as read: its bytes, its version (0 after create) and its ctime in ms; and, where the
    backend says (ZooKeeper's ``cversion``), the version of its list of children, which moves
    whenever a child is created or deleted (None: not known)."""

    data: bytes
    version: int
    ctime_ms: int
    children_version: int | None = None


@dataclass(frozen=True, slots=True)
class CheckVersion:
    """Multi-op step: fail the whole batch unless ``path`` is at ``version``."""

    path: str
    version: int


@dataclass(frozen=True, slots=True)
class Put:
    """Multi-op step: create (``ABSENT``), CAS-update (a version) or overwrite (``ANY``)."""

    path: str
    data: bytes
    expected_version: int


@dataclass(frozen=True, slots=True)
class Delete:
    """Multi-op step: remove ``path`` if at ``expected_version`` (or ``ANY``)."""

    path: str
    expected_version: int


Op = CheckVersion | Put | Delete


class NodeDeleteOutcome(StrEnum):
    """What happened to one metadata node of a batched delete."""

    DELETED = "deleted"
    #: our delete's reply was lost, and a re-read found the node gone together with every other node
    #: of its atomic batch: taken as ours (see :meth:`MetadataStore.delete_many` for what that proves)
    DELETED_REPLY_LOST = "deleted_reply_lost"
    ABSENT = "absent"  # already gone (not by us): success for an idempotent deleter
    BAD_VERSION = "bad_version"  # changed since verified: must not be deleted
    NOT_EMPTY = "not_empty"
    #: sent, reply lost, and the store did not answer the re-read: maybe applied; re-verify later
    UNKNOWN = "unknown"
    #: not deleted, provably: never sent (store unavailable), or sent, not applied and not yet sent again
    UNAVAILABLE = "unavailable"


class BatchFate(StrEnum):
    """What became of one atomic delete multi-op, as its reply (or the lack of one) says."""

    APPLIED = "applied"
    REFUSED = "refused"  # answered with a failed step: nothing applied
    UNKNOWN = "unknown"  # sent and no reply (connection lost, timeout): applied or not
    NOT_SENT = "not_sent"  # the store was unavailable before it was sent: nothing applied

#: Rounds of "send what is provably not deleted, re-read what is in doubt" in one ``delete_many``.
DELETE_ROUNDS: Final = 3


class MetadataStoreError(Exception):
    """Base of every error a backend raises; the message is meant for an operator."""


class NoNodeError(MetadataStoreError):
    """The node (or, for a create, its parent chain could not be made) does not exist."""


class NodeExistsError(MetadataStoreError):
    """A create found the node already there."""


class BadVersionError(MetadataStoreError):
    """A compare-and-set lost: somebody else wrote the node since it was read."""


class NotEmptyError(MetadataStoreError):
    """A delete found children under the node."""


class RequestTooLargeError(MetadataStoreError):
    """Refused before sending: the request would exceed the store's request limit."""


class MetadataStoreUnavailable(MetadataStoreError):
    """The store cannot be reached or the session was lost: transient, retry later.

    For a write, this alone does not say whether it was applied (its reply may be what was lost);
    :class:`NotSentError` does."""


class NotSentError(MetadataStoreUnavailable):
    """The store was unavailable and the request was provably not applied (never sent, or rolled
    back): repeating it is safe."""


class MultiOpError(MetadataStoreError):
    """An atomic multi-op failed and nothing was applied.

    ``index`` is the failing step and ``cause`` the error that step alone
    would have raised, so callers can tell "a cursor moved" (a
    :class:`BadVersionError` on a :class:`CheckVersion`) from other failures.
    """

    def __init__(self, index: int, op: Op, cause: MetadataStoreError) -> None:
        super().__init__(f"multi-op step {index} ({type(op).__name__} {op.path}) failed: {cause}")
        self.index = index
        self.op = op
        self.cause = cause


class Leadership(abc.ABC):
    """One holder at a time among the processes contending under one path of a store.

    :meth:`holds` is this process's view: True only while the store still vouches for it (a
    ZooKeeper connection that is suspended or lost ends it at once, before the session does), so
    a holder that acts after checking it acts at most one check late.  What a holder does with the
    role must stay safe when two briefly believe they hold it."""

    @abc.abstractmethod
    def holds(self) -> bool:
        """Whether this process holds the role now."""

    @abc.abstractmethod
    def holder(self) -> str | None:
        """The identifier of whoever holds the role (this process or another), None when nobody
        does or the store cannot tell now."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop contending and give the role up."""


class SoleLeadership(Leadership):
    """The role of a store only one daemon serves (the embedded SQLite store): always held."""

    def __init__(self, identifier: str) -> None:
        self.identifier = identifier
        self._closed = False

    def holds(self) -> bool:
        return not self._closed

    def holder(self) -> str | None:
        return None if self._closed else self.identifier

    def close(self) -> None:
        self._closed = True


class MetadataStore(abc.ABC):
    """A versioned tree of nodes; paths are absolute and ``/``-separated."""

    #: Requests larger than this are refused with :class:`RequestTooLargeError`.
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES

    @abc.abstractmethod
    def get(self, path: str) -> Node | None:
        """The node at ``path``, or ``None`` when absent."""

    @abc.abstractmethod
    def put(self, path: str, data: bytes, expected_version: int) -> int:
        """Create or compare-and-set ``path``; returns the new version.

        Missing parents are created empty, as Pulsar's metadata store does.
        """

    @abc.abstractmethod
    def delete(self, path: str, expected_version: int) -> None:
        """Remove ``path`` at ``expected_version``; :class:`NoNodeError` when absent."""

    @abc.abstractmethod
    def children(self, path: str) -> list[str]:
        """Names (not paths) of the children of ``path``, sorted; ``[]`` when absent."""

    @abc.abstractmethod
    def multi(self, ops: Sequence[Op]) -> list[int | None]:
        """Apply ``ops`` atomically; returns the new version of each put (``None`` otherwise).

        Raises :class:`MultiOpError` (nothing applied) when any step fails.
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections; the store is unusable afterwards."""

    def leadership(self, path: str, identifier: str) -> Leadership:
        """Contend for the role named by ``path`` as ``identifier`` (shown to operators as its holder).
        A store that only one daemon serves holds it at once; ZooKeeper elects one holder."""
        return SoleLeadership(identifier)

    # ---- conveniences with a default implementation; backends may pipeline them

    def sync(self) -> None:
        """Make this client's later reads see every write committed anywhere before this call.
        ZooKeeper serves reads from the server a session talks to, which may lag the leader: a
        node another client created a moment ago can read as absent.  A no-op where reads never lag."""
        return None

    def exists(self, path: str) -> bool:
        return self.get(path) is not None

    def get_many(self, paths: Iterable[str]) -> dict[str, Node | None]:
        """Read many nodes; ZooKeeper pipelines these instead of a round trip each."""
        return {p: self.get(p) for p in paths}

    def children_many(self, paths: Iterable[str]) -> dict[str, list[str]]:
        """The children of many nodes (``[]`` for an absent one); ZooKeeper pipelines these."""
        return {p: self.children(p) for p in paths}

    def delete_many(
        self, targets: Sequence[tuple[str, int]], batch_size: int = 100
    ) -> dict[str, NodeDeleteOutcome]:
        """Delete each ``(path, version)``, batched into multi-ops of at most ``batch_size``.

        A batch is tried atomically first (one round trip for the common case
        where every node is as verified); if it is refused, its nodes are tried one
        by one so that one changed node neither blocks nor drags down the rest.
        Each node ends with an outcome; none is deleted at another version.  Never
        raises for an unavailable store: every node says what became of it.

        A write whose reply was lost is never repeated blindly (as kazoo's lock
        recipe, it is resolved by reading back).  What a re-read can prove, per
        batch in doubt (the session's requests are applied in order, so a read sent
        after the multi sees its effect if it had any):

        * some node of the batch is still there: the multi, being atomic, was **not**
          applied.  A node still at its verified version is sent again (only it, in
          the next round); one at another version is ``BAD_VERSION``; one gone was
          deleted by someone else: ``ABSENT``.
        * every node of the batch is gone: ``DELETED_REPLY_LOST``.  Not a proof that
          we deleted them: whoever else deletes ledger znodes (a broker deleting its
          own ledger, another daemon holding a redelivered copy of the request) could
          have removed every one of them between our verification and the re-read.
          It is taken as ours because our delete, at the verified version, was sent
          and would have removed exactly this; the caller records the caveat.
        * the store does not answer the re-read: ``UNKNOWN`` (re-verify later).

        What is still provably not deleted after ``DELETE_ROUNDS`` is ``UNAVAILABLE``.
        """
        outcomes: dict[str, NodeDeleteOutcome] = {}
        todo = list(targets)
        for _ in range(DELETE_ROUNDS):
            if not todo:
                break
            in_doubt: list[list[tuple[str, int]]] = []
            batches = list(_batches(todo, batch_size, self.max_request_bytes))
            for batch, fate in zip(batches, self._delete_batches(batches), strict=True):
                match fate:
                    case BatchFate.APPLIED:
                        outcomes.update((p, NodeDeleteOutcome.DELETED) for p, _ in batch)
                    case BatchFate.UNKNOWN:
                        in_doubt.append(batch)
                    case BatchFate.NOT_SENT:
                        outcomes.update((p, NodeDeleteOutcome.UNAVAILABLE) for p, _ in batch)
                    case BatchFate.REFUSED:
                        for path, version in batch:
                            one = self._delete_one(path, version)
                            if one == NodeDeleteOutcome.UNKNOWN:
                                in_doubt.append([(path, version)])
                            else:
                                outcomes[path] = one
                    case _:
                        assert_never(fate)
            settled, todo = self._settle_in_doubt(in_doubt)
            outcomes.update(settled)
        outcomes.update((p, NodeDeleteOutcome.UNAVAILABLE) for p, _ in todo)
        return outcomes

    def _settle_in_doubt(
        self, batches: Sequence[Sequence[tuple[str, int]]]
    ) -> tuple[dict[str, NodeDeleteOutcome], list[tuple[str, int]]]:
        """Re-read the nodes of batches whose reply was lost: each node's outcome, and what to send again."""
        if not batches:
            return {}, []
        paths = [p for batch in batches for p, _ in batch]
        try:
            nodes = self._reread(paths)
        except MetadataStoreUnavailable:
            return {p: NodeDeleteOutcome.UNKNOWN for p in paths}, []
        settled: dict[str, NodeDeleteOutcome] = {}
        again: list[tuple[str, int]] = []
        for batch in batches:
            if all(nodes[p] is None for p, _ in batch):
                settled.update((p, NodeDeleteOutcome.DELETED_REPLY_LOST) for p, _ in batch)
                continue
            for path, version in batch:  # not applied: some node of it is still there
                node = nodes[path]
                if node is None:
                    settled[path] = NodeDeleteOutcome.ABSENT
                elif node.version == version:
                    again.append((path, version))
                else:
                    settled[path] = NodeDeleteOutcome.BAD_VERSION
        return settled, again

    def _reread(self, paths: Sequence[str]) -> dict[str, Node | None]:
        """Read back nodes whose delete is in doubt, waiting a few seconds for the store to come back.
        ZooKeeper first syncs, so that a server the session moved to has seen every write the
        session made before (a multi applied by the leader must not be read as "still there")."""
        attempts = Retrying(stop=stop_after_attempt(REREAD_ATTEMPTS), wait=wait_exponential(multiplier=0.2, max=2),
                            retry=retry_if_exception_type(MetadataStoreUnavailable), reraise=True)
        return attempts(self._read_after_writes, paths)

    def _read_after_writes(self, paths: Sequence[str]) -> dict[str, Node | None]:
        """``get_many``, seeing every write this client made before; backends with lagging replicas override."""
        return self.get_many(paths)

    def _delete_batches(self, batches: Sequence[Sequence[tuple[str, int]]]) -> list[BatchFate]:
        """What became of each batch's atomic delete; ZooKeeper overrides this to keep several in
        flight (its log then syncs them together)."""
        fates = []
        for batch in batches:
            try:
                self.multi([Delete(p, v) for p, v in batch])
            except MultiOpError:
                fates.append(BatchFate.REFUSED)
            except NotSentError:
                fates.append(BatchFate.NOT_SENT)
            except MetadataStoreUnavailable:
                fates.append(BatchFate.UNKNOWN)
            else:
                fates.append(BatchFate.APPLIED)
        return fates

    def _delete_one(self, path: str, version: int) -> NodeDeleteOutcome:
        try:
            self.delete(path, version)
        except NoNodeError:
            return NodeDeleteOutcome.ABSENT
        except BadVersionError:
            return NodeDeleteOutcome.BAD_VERSION
        except NotEmptyError:
            return NodeDeleteOutcome.NOT_EMPTY
        except NotSentError:
            return NodeDeleteOutcome.UNAVAILABLE
        except MetadataStoreUnavailable:
            return NodeDeleteOutcome.UNKNOWN
        return NodeDeleteOutcome.DELETED

    def check_request_size(self, ops: Sequence[Op]) -> None:
        size = request_size(ops)
        if size > self.max_request_bytes:
            raise RequestTooLargeError(
                f"request of {size} bytes exceeds the metadata store limit of "
                f"{self.max_request_bytes} bytes (ZooKeeper jute.maxbuffer); "
                "compress the node or split the batch"
            )

    def __enter__(self) -> MetadataStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def walk(store: MetadataStore, path: str) -> Iterator[str]:
    """Every path below ``path`` in ``store`` (depth first, parents before children)."""
    for name in store.children(path):
        child = join(path, name)
        yield child
        yield from walk(store, child)


def request_size(ops: Sequence[Op]) -> int:
    """Approximate wire size of a request: payloads plus paths plus framing."""
    total = 0
    for op in ops:
        total += len(op.path.encode()) + 16
        if isinstance(op, Put):
            total += len(op.data)
    return total


def _batches(
    targets: Sequence[tuple[str, int]], batch_size: int, max_bytes: int
) -> Iterator[list[tuple[str, int]]]:
    batch: list[tuple[str, int]] = []
    size = 0
    for path, version in targets:
        item = len(path.encode()) + 16
        if batch and (len(batch) >= batch_size or size + item > max_bytes):
            yield batch
            batch, size = [], 0
        batch.append((path, version))
        size += item
    if batch:
        yield batch


def join(parent: str, name: str) -> str:
    return f"{parent.rstrip('/')}/{name}"


def parent_of(path: str) -> str:
    head = path.rsplit("/", 1)[0]
    return head or "/"


#: No Pulsar or BookKeeper path comes near this.  A request carrying a bigger one makes ZooKeeper
#: drop the connection (``jute.maxbuffer``), which looks like an outage to every request sharing it.
MAX_PATH_BYTES = 16 * 1024


def validate_path(path: str) -> None:
    """Reject paths ZooKeeper would reject, with the same rules on every backend.  Checked for every
    node a batched read names, so the common case costs no encoding and no split: a path of at most
    a quarter of the limit in characters is within it in UTF-8, and a dot segment follows a slash."""
    if len(path) * 4 > MAX_PATH_BYTES and len(path.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise ValueError(f"invalid metadata path of {len(path.encode('utf-8', 'surrogatepass'))} bytes: "
                         f"over {MAX_PATH_BYTES}")
    if not path.startswith("/") or (path != "/" and path.endswith("/")) or "//" in path:
        raise ValueError(f"invalid metadata path {path!r}: must be absolute, no empty or trailing segment")
    if "/." in path and any(seg in (".", "..") for seg in path.split("/")[1:]):
        raise ValueError(f"invalid metadata path {path!r}: '.' and '..' segments are not allowed")
