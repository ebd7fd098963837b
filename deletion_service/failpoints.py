"""Failpoints: named places in both phases where a test or the soak makes the process fail on purpose.

Why: the two invariants (never delete what metadata references, never leave an
orphan once a ledger left metadata) must hold if the process dies at *any*
step, and "any step" is only testable if each step can be reached and killed
on demand, with the real processes.  Off by default, and free when off: a
call is one test of an empty dict.

Driven by the environment (so a child process inherits them, as the soak's do)::

    LEDGER_DELETION_FAILPOINTS="delete.before-ack=kill@3,trim.after-write=kill"

``NAME=ACTION[@N]``: ``kill`` (SIGKILL this process), ``exit`` (exit 86 at
once, no clean-up), ``raise`` (:class:`FailpointError`), ``sleep:SECONDS``,
``wait-for:PATH`` (hold here until the file PATH exists, at most :data:`WAIT_FOR_MAX_S`: a test
lets the process go on once it has done what it needed done meanwhile, however loaded the
machine, where a sleep only gives it time);
``@N`` acts on the N-th time the point is reached (default 1; ``@0`` every
time).  Unknown names are reported by :func:`check` so a typo is not a soak
that silently proves nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass

ENV = "LEDGER_DELETION_FAILPOINTS"
EXIT_CODE = 86
#: ``wait-for:PATH`` goes on after this long even without the file (a test that failed never writes it).
WAIT_FOR_MAX_S = 300.0
_USAGE = "expected NAME=kill|exit|raise|sleep:SECONDS|wait-for:PATH[@N]"

#: Every failpoint, in the order a request meets them, and where it is.
POINTS: dict[str, str] = {
    "send.before-receipt": "a window of requests or copies is sent; its receipts are not awaited yet",
    "trim.after-receipts": "trim has every receipt; the managed-ledger node is not written yet",
    "trim.after-write": "trim wrote the managed-ledger node without the receipted ledgers",
    "delete.before-storage": "the delete phase verified a batch; nothing deleted yet",
    "delete.between-bookkeeper-and-offload": "a batch's BookKeeper deletes are done; its offload requests wait "
                                             "in the offload lane",
    "delete.before-ack": "a request's deletion (or verdict) is done; its message is not acked",
    "retry.after-publish": "a RETRY copy is receipted; the original is not acked",
    "dlq.after-publish": "a DLQ copy is receipted; the original is not acked",
    "cursor.reset-before-write": "cursor reset changed the cursor in memory; its node is not written",
    "broker.starting": "the embedded broker's process is spawned; it does not answer yet",
}
#: The leak watcher's failpoints, apart: its randomized test reaches each of them (the soak, every one above).
WATCHER_POINTS: dict[str, str] = {
    "watch.before-send": "the leak watcher found leaks past the settle delay; their requests are not sent",
    "watch.after-pass": ("a leak watcher pass sent its requests; its reading is kept, the sent "
                         "ones still in the kept waiting list"),
}

_log = logging.getLogger(__name__)


class FailpointError(RuntimeError):
    """Raised by a failpoint whose action is ``raise``."""


@dataclass
class _Action:
    what: str  # kill | exit | raise | sleep | wait-for
    nth: int = 1
    seconds: float = 0.0
    path: str = ""
    hits: int = 0


def parse(text: str) -> tuple[dict[str, _Action], list[str]]:
    """The actions in ``text``, and what could not be understood (unknown names, bad actions)."""
    active: dict[str, _Action] = {}
    problems: list[str] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, spec = item.partition("=")
        spec, _, nth = spec.partition("@")
        what, _, arg = spec.partition(":")
        if name not in POINTS and name not in WATCHER_POINTS:
            problems.append(f"unknown failpoint {name!r} (known: {', '.join([*POINTS, *WATCHER_POINTS])})")
            continue
        try:
            seconds = float(arg) if arg and what == "sleep" else 0.0
            action = _Action(what, int(nth) if nth else 1, seconds, arg if what == "wait-for" else "")
        except ValueError:
            problems.append(f"{item!r}: {_USAGE}")
            continue
        known = what in ("kill", "exit", "raise", "sleep") or (what == "wait-for" and bool(arg))
        if not known or action.nth < 0:
            problems.append(f"{item!r}: {_USAGE}")
            continue
        active[name] = action
    return active, problems


_active, _problems = parse(os.environ.get(ENV, ""))
_lock = threading.Lock()
#: A process whose death this one's failpoint must bring about too (the daemon, seen from its delete process).
_also: int | None = None


def kill_with(pid: int) -> None:
    """Make ``kill`` and ``exit`` here end ``pid`` too (SIGKILL), first: the delete process is part of
    the daemon (:mod:`.delete_phase.process.child`), and a failpoint there means "the daemon dies here"."""
    global _also
    _also = pid


def configure(text: str) -> list[str]:
    """Replace the active failpoints (tests in one process); returns what could not be understood."""
    global _active, _problems
    with _lock:
        _active, _problems = parse(text)
        return list(_problems)


def check() -> list[str]:
    """What the environment's failpoints got wrong (a command reports these at start)."""
    return list(_problems)


def failpoint(name: str) -> None:
    """Reach the failpoint ``name``: nothing at all unless it is active."""
    if not _active:
        return
    _reach(name)


def _reach(name: str) -> None:
    with _lock:
        action = _active.get(name)
        if action is None:
            return
        action.hits += 1
        if action.nth and action.hits != action.nth:
            return
    _log.warning("failpoint %s: %s", name, action.what)
    if action.what in ("kill", "exit") and _also is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(_also, signal.SIGKILL)
    if action.what == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action.what == "exit":
        os._exit(EXIT_CODE)
    elif action.what == "raise":
        raise FailpointError(f"failpoint {name}")
    elif action.what == "wait-for":
        deadline = time.monotonic() + WAIT_FOR_MAX_S
        while not os.path.exists(action.path) and time.monotonic() < deadline:
            time.sleep(0.05)
    else:
        time.sleep(action.seconds)
