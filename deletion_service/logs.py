"""Logs for operators: readable text by default, one JSON object per line for log pipelines.

Structured fields: a record logged with ``extra={"ledger": …, "topic": …, "outcome": …,
"reason": …}`` carries them as JSON keys of their own, so a pipeline filters on
``outcome == "dlq"`` instead of parsing prose out of ``msg`` (a batch's routine line
carries ``ledgers``, a list, and ``count`` instead of ``ledger``).

The delete phase's INFO lines are the operator's view of it (a line per batch, topic and
routine outcome naming every ledger, and a line per request for any other outcome:
``delete_phase/consumer/disposer.py``).  Were each line its own ``write`` to stderr, that write
would take a sixth of the delete-phase thread's time (a profile of the daemon draining requests).  So the thread
that settles a batch collects its INFO lines and writes them at once when the batch
ends (:func:`one_write_per_batch`); a WARNING or worse is written at once, after the
thread's lines before it, so the order of a thread's lines is kept.  What a batch
logged is written before the worker takes its next batch, and on any exit through
Python; only a process killed outright (SIGKILL) in the middle of a batch loses that
batch's INFO lines, which the audit trail records anyway.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

NOISY = ("kazoo", "pulsar", "pulsar-client", "botocore", "urllib3", "uvicorn.access")

#: ``extra`` keys copied into a JSON log line as fields of their own.
FIELDS = ("ledger", "ledgerType", "topic", "outcome", "reason", "messageId", "attempts", "summary",
          "ledgers", "count")


class RecentProblems(logging.Handler):
    """The last warnings and errors of each kind, kept for ``/status`` (an operator's "what went wrong
    last?"): the latest line of a kind, with how often its kind came (``repeated``), the kinds in the
    order they last came.

    A kind is the logger and the request outcome a line reports (``extra={"outcome": …}``; a dead-letter
    line's DLQ reason too, one of ours), else its message template.  Were they the last 20 lines,
    twenty requests a tenant chose to end in a metadata mismatch would replace every line of the
    list, the warning that the trail cannot be written among them; by kind, a flood is one entry
    with its count, and the other kinds stay."""

    def __init__(self, keep: int = 20) -> None:
        super().__init__(logging.WARNING)
        self.keep = keep
        self._by_kind: OrderedDict[tuple[str, str], dict[str, str | int]] = OrderedDict()  # oldest kind first
        self._lock_kinds = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        ts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created))
        kind = _kind(record)
        entry: dict[str, str | int] = {"ts": ts, "level": record.levelname.lower(), "logger": record.name,
                                       "msg": record.getMessage()[:500]}
        with self._lock_kinds:
            before = self._by_kind.pop(kind, None)
            entry["repeated"] = int(before["repeated"]) + 1 if before is not None else 1
            self._by_kind[kind] = entry
            while len(self._by_kind) > self.keep:
                self._by_kind.popitem(last=False)

    @property
    def records(self) -> list[dict[str, str | int]]:
        with self._lock_kinds:
            return list(self._by_kind.values())


def _kind(record: logging.LogRecord) -> tuple[str, str]:
    outcome = getattr(record, "outcome", None)
    if outcome is None:
        return record.name, str(record.msg)
    return record.name, f"{outcome} {getattr(record, 'reason', '')}" if outcome == "dlq" else str(outcome)


_recent = RecentProblems()


def recent_problems() -> list[dict[str, str | int]]:
    return _recent.records


class _SecondStamps:
    """The date-and-time part of a record's stamp, formatted once per second: a draining daemon
    logs thousands of lines a second, and ``strftime`` per line was a tenth of their cost."""

    def __init__(self, fmt: str, convert: Callable[[float], time.struct_time]) -> None:
        self._fmt, self._convert = fmt, convert
        self._last: tuple[int, str] = (-1, "")  # one attribute: threads read a second with its own text

    def __call__(self, created: float) -> str:
        second = int(created)
        last = self._last
        if last[0] != second:  # racing threads at worst both format the same second
            last = self._last = (second, time.strftime(self._fmt, self._convert(second)))
        return last[1]


class TextFormatter(logging.Formatter):
    """``logging.Formatter``'s text, with its stamp's seconds formatted once per second."""

    def __init__(self, fmt: str) -> None:
        super().__init__(fmt)
        self._stamps = _SecondStamps(self.default_time_format, self.converter)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 - logging's name
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        return f"{self._stamps(record.created)},{int(record.msecs):03d}"


class JsonFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__()
        self._stamps = _SecondStamps("%Y-%m-%dT%H:%M:%S", time.gmtime)

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": f"{self._stamps(record.created)}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update({k: getattr(record, k) for k in FIELDS if hasattr(record, k)})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


class BatchedStreamHandler(logging.StreamHandler):
    """A stream handler that, inside :meth:`batch` on the calling thread, keeps INFO and DEBUG lines
    until the batch ends and writes them in one call (other threads, and WARNING or worse, at once)."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self._local = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        pending: list[str] | None = getattr(self._local, "pending", None)
        if pending is None or record.levelno >= logging.WARNING:
            if pending:
                self._write(pending)  # this thread's earlier lines first
            super().emit(record)
            return
        try:
            pending.append(self.format(record) + self.terminator)
        except RecursionError:
            raise
        except Exception:  # noqa: BLE001 - as StreamHandler.emit: a bad record never raises into the caller
            self.handleError(record)

    @contextmanager
    def batch(self) -> Iterator[None]:
        if getattr(self._local, "pending", None) is not None:  # nested: the outer batch writes
            yield
            return
        self._local.pending = []
        try:
            yield
        finally:
            pending, self._local.pending = self._local.pending, None
            if pending:
                self._write(pending)

    def _write(self, pending: list[str]) -> None:
        text = "".join(pending)
        pending.clear()
        self.acquire()
        try:
            self.stream.write(text)
            self.flush()
        except Exception:  # noqa: BLE001 - as StreamHandler.emit: a closed stream never raises into the caller
            sys.stderr.write("--- Logging error: could not write a batch of log lines ---\n")
        finally:
            self.release()


_handler: BatchedStreamHandler | None = None


@contextmanager
def one_write_per_batch() -> Iterator[None]:
    """The INFO lines this thread logs inside are written together when it ends (see the module
    docstring); without :func:`configure` (a library caller), lines go as its own handlers send them."""
    if _handler is None:
        yield
        return
    with _handler.batch():
        yield


def _skip_what_no_format_prints() -> None:
    """The caller's file and line, the process and thread: none of our formats prints them, and
    looking them up was a fifth of each outcome line's cost (the logging HOWTO's "Optimization")."""
    logging._srcfile = None  # noqa: SLF001 - the HOWTO's documented switch for the caller lookup
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


def configure(level: int = logging.INFO, fmt: str = "text", quiet_libraries: bool = True) -> None:
    global _handler
    _skip_what_no_format_prints()
    handler = _handler = BatchedStreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler, _recent]
    root.setLevel(level)
    for name in NOISY:
        logging.getLogger(name).setLevel(logging.CRITICAL if quiet_libraries else logging.WARNING)
