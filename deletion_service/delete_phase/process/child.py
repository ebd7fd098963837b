"""The delete process: the BookKeeper requests' gather → decide → delete, in a child process of the daemon.

Why a process: in the daemon's own thread, profiling shows the delete phase busy all the time with
~15 per-request steps of Python under one GIL, and the one core it can use sets the rate; a
second thread cannot help under that lock.  So the half of the work that talks to the metadata
stores (gathering the facts, the decision table, the deletes at the verified versions) runs here,
in a process of its own with its own sessions, while the daemon's thread receives, records, acks
and publishes.  :mod:`.lane` keeps a batch here while the daemon disposes of the
one before, so the two halves overlap.

What does not change: the same :class:`~.pipeline.DeletePipeline` decides, from facts it reads
itself, with the same table; the daemon's one thread still owns every disposition (nothing
here publishes, records or acks).  One batch at a time, in order, so a ledger named twice in
two batches is verified the second time after the first time's delete; and a batch's deletes wait
until the daemon has recorded the batch before (:data:`RECORDS_FIRST`), so a daemon killed mid-run
leaves no more deleted-but-unrecorded than without this process.  This process dies with
the daemon (``PR_SET_PDEATHSIG``, and it exits when its pipe closes), and a failpoint that kills
it kills the daemon too (:func:`deletion_service.failpoints.kill_with`): the soak's kills mean
"the daemon dies here", whichever of the two processes it hits.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from deletion_service import failpoints, logs
from deletion_service.delete_phase.pipeline import DeletePipeline
from deletion_service.delete_phase.rules.decision import Action, Policy
from deletion_service.delete_phase.storage.execute import Executor, RateLimiter
from deletion_service.delete_phase.storage.gather import FactGatherer
from deletion_service.protocol.fate import DeleteStatus
from deletion_service.protocol.request import PendingDeleteLedgerInfo
from metastore import open_store
from offloaders.registry import OffloaderSettings

_log = logging.getLogger(__name__)

#: How long the process may take to open its stores and say it is ready.
READY_TIMEOUT_S = 60.0


#: The child's question once a batch is decided and it has deletes to do, and the daemon's answer.  Its
#: deletes wait until the daemon has recorded the batch before: a daemon killed while it disposes of one
#: batch leaves at most that batch's deletes unrecorded (their requests, redelivered, are recorded
#: ``absent``), as without the delete process; gathering and deciding still overlap with the disposal.
RECORDS_FIRST = "deletes next"
DELETE_NOW = "delete"


class DeleteProcessDied(RuntimeError):
    """The delete process is gone (killed, out of memory): what it held is decided again."""


class DeleteBatchFailed(RuntimeError):
    """The delete process met an error no request of the batch could be settled past (a bug): the batch
    is decided again later; the process stays up."""


@dataclass(frozen=True)
class DeleteProcessSpec:
    """What the child needs to build the same pipeline as the daemon's (picklable: it crosses a pipe)."""

    store_url: str
    bookkeeper_store_url: str
    digest_file: Path | None
    ledgers_root: str
    max_deletions_per_second: float
    offload: OffloaderSettings
    dry_run: bool
    log_level: int
    log_format: str


@dataclass
class _Tally:
    """The child's stand-in for the daemon's metrics: the pipeline's one count, sent back per batch."""

    counted: Counter[tuple[str, DeleteStatus]]

    def count_deletes(self, results: Counter[tuple[str, DeleteStatus]]) -> None:
        self.counted.update(results)


class DeleteProcess:
    """The daemon's side: one child, one batch at a time (:meth:`run` has the pipeline's signature)."""

    def __init__(self, spec: DeleteProcessSpec, counter: Any) -> None:
        """``counter``: where the child's delete counts go (``DeletionMetrics.count_deletes``)."""
        self.counter = counter
        self._conn, child_conn = multiprocessing.Pipe()
        fd = child_conn.fileno()
        # Never fork a process with the client's threads: a fresh interpreter, which asks to die with the
        # daemon before it imports anything (otherwise one SIGSTOPped during its imports could
        # outlive a SIGKILLed daemon), then says so; no extra process of multiprocessing's either.
        self._process = subprocess.Popen([sys.executable, "-c", _BOOTSTRAP, str(fd), str(os.getpid())],
                                         pass_fds=[fd], stdin=subprocess.DEVNULL, env=_child_env())
        child_conn.close()
        self._conn.send(spec)
        self._ready = False
        self._ready_lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def ready(self) -> bool:
        """It has said it opened its stores (:meth:`wait_ready` read that)."""
        return self._ready

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S, stop: threading.Event | None = None) -> bool:
        """Until the child has opened its stores (raises :class:`DeleteProcessDied` with its reason if it
        cannot); False if ``stop`` was set first (a SIGTERM while starting).  The daemon's start and the
        lane's first batch may both ask: one reads the answer."""
        deadline = time.monotonic() + timeout_s
        with self._ready_lock:
            while not self._ready:
                if stop is not None and stop.is_set():
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DeleteProcessDied(f"the delete process did not start within {timeout_s:.0f} s")
                if not self._conn.poll(min(left, 0.2)):
                    continue
                answer = self._recv()
                if answer == "armed":  # it dies with the daemon from now on; its stores come next
                    continue
                if answer != "ready":
                    raise DeleteProcessDied(f"the delete process could not start: {answer}")
                self._ready = True
            return True

    def run(self, requests: Sequence[PendingDeleteLedgerInfo], attempts: Sequence[int], policy: Policy,
            grace_since: Sequence[int | None] | None = None,
            before_deletes: Callable[[], None] | None = None) -> list[Action]:
        """The pipeline's ``run`` in the child; ``before_deletes`` returns once the child may delete (the
        batch before is recorded), or raises :class:`DeleteProcessDied` to leave this batch undeleted."""
        self.wait_ready()
        self._send((list(requests), list(attempts), policy, list(grace_since or [None] * len(requests))))
        answer = self._recv()
        if answer == RECORDS_FIRST:
            if before_deletes is not None:
                before_deletes()
            self._send(DELETE_NOW)
            answer = self._recv()
        actions, counted = answer
        if counted:
            self.counter(counted)
        if isinstance(actions, str):
            raise DeleteBatchFailed(f"the delete process could not decide this batch ({actions})")
        return actions

    def _send(self, message: object) -> None:
        try:
            self._conn.send(message)
        except (OSError, EOFError) as e:
            raise DeleteProcessDied(self._why_dead(e)) from e

    def _recv(self) -> Any:
        try:
            return self._conn.recv()
        except (OSError, EOFError) as e:
            raise DeleteProcessDied(self._why_dead(e)) from e

    def _why_dead(self, e: BaseException) -> str:
        try:
            code = self._process.wait(1.0)
        except subprocess.TimeoutExpired:
            code = None
        how = (f"killed by signal {-code}" if code is not None and code < 0
               else f"exit code {code}" if code is not None else f"{type(e).__name__}")
        return f"the delete process died ({how})"

    def close(self, wait_s: float = 5.0) -> None:
        """Ask the child to exit after the batch it holds; killed (by its PID) if it does not."""
        with contextlib.suppress(OSError, EOFError, ValueError):
            self._conn.send(None)
        try:
            self._process.wait(wait_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(2.0)
        self._conn.close()


#: In the delete process's command line, so people and tests can tell it from other Python processes.
MARKER = "ledger-deletion-delete-process"
#: The child's first lines: ask the kernel to SIGKILL it when the daemon dies, before any import that takes
#: time, and give up at once if the daemon is gone already; then the real work (``child_main``).
_BOOTSTRAP = (
    f"# {MARKER}\n"  # first, where ``ps`` and /proc/PID/cmdline readers look
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGKILL)\n"
    "os.getppid() == int(sys.argv[2]) or os._exit(1)\n"
    "from deletion_service.delete_phase.process.child import child_main\n"
    "child_main(int(sys.argv[1]), int(sys.argv[2]))\n"
)


def _child_env() -> dict[str, str]:
    """The daemon's environment, with this package's own root first on the path: the child imports the
    code its daemon runs, wherever the daemon was started from (a checkout, an image, a virtualenv)."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}


def child_main(fd: int, parent_pid: int) -> None:
    """The delete process, armed already (see :data:`_BOOTSTRAP`): it says so, then reads its spec."""
    conn = Connection(fd)
    conn.send("armed")
    spec = conn.recv()
    _child_main(conn, spec, parent_pid)


def _child_main(conn: Connection, spec: DeleteProcessSpec, parent_pid: int) -> None:
    """The child: build the pipeline, then answer batches until the pipe closes or says stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the daemon decides when to stop
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logs.configure(spec.log_level, spec.log_format)
    failpoints.kill_with(parent_pid)
    try:
        store = open_store(spec.store_url, digest_file=spec.digest_file, create=False)
        bk_store = store if spec.bookkeeper_store_url == spec.store_url else \
            open_store(spec.bookkeeper_store_url, digest_file=spec.digest_file, create=False)
    except Exception as e:  # noqa: BLE001 - told to the daemon, which says it in one line
        conn.send(f"{type(e).__name__}: {e}")
        return
    tally = _Tally(Counter())
    pipeline = DeletePipeline(FactGatherer(store, bk_store, spec.offload, spec.ledgers_root),
                              Executor(bk_store, spec.offload, RateLimiter(spec.max_deletions_per_second),
                                       dry_run=spec.dry_run), tally)
    gc.collect()
    gc.freeze()  # as the daemon does after its start: what lives as long as the process, unwalked
    conn.send("ready")
    try:
        while (batch := _next_batch(conn, parent_pid)) is not None:
            requests, attempts, policy, grace_since = batch
            try:
                decided = pipeline.decide(requests, attempts, policy, grace_since)
                if decided.deletes:
                    conn.send(RECORDS_FIRST)
                    if _next_batch(conn, parent_pid) != DELETE_NOW:
                        return  # the daemon stops or is gone: this batch is left undeleted, unacked
                actions = pipeline.delete(decided)
            except Exception as e:  # noqa: BLE001 - the pipeline's last guard failed: say so, stay up
                _log.exception("the delete process could not decide a batch of %d", len(requests))
                conn.send((f"{type(e).__name__}: {e}", Counter(tally.counted)))
            else:
                conn.send((actions, Counter(tally.counted)))
            tally.counted.clear()
    finally:
        for s in {id(store): store, id(bk_store): bk_store}.values():
            with contextlib.suppress(Exception):
                s.close()


def _next_batch(conn: Connection, parent_pid: int) -> Any:
    """The next batch, or None: told to stop, the pipe closed, or the daemon gone."""
    while not conn.poll(1.0):
        if os.getppid() != parent_pid:
            return None
    try:
        return conn.recv()
    except (OSError, EOFError):
        return None
