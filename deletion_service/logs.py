"""Logs for operators: readable text by default, one JSON object per line for log pipelines.

Structured fields: a record logged with ``extra={"ledger": …, "topic": …, "outcome": …,
"reason": …}`` carries them as JSON keys of their own, so a pipeline filters on
``outcome == "dlq"`` instead of parsing prose out of ``msg``.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections import deque

NOISY = ("kazoo", "pulsar", "pulsar-client", "botocore", "urllib3", "uvicorn.access")

#: ``extra`` keys copied into a JSON log line as fields of their own.
FIELDS = ("ledger", "ledgerType", "topic", "outcome", "reason", "messageId", "attempts", "summary")


class RecentProblems(logging.Handler):
    """The last warnings and errors, kept for ``/status`` (an operator's "what went wrong last?")."""

    def __init__(self, keep: int = 20) -> None:
        super().__init__(logging.WARNING)
        self.records: deque[dict[str, str]] = deque(maxlen=keep)

    def emit(self, record: logging.LogRecord) -> None:
        ts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created))
        self.records.append({"ts": ts, "level": record.levelname.lower(), "logger": record.name,
                             "msg": record.getMessage()[:500]})


_recent = RecentProblems()


def recent_problems() -> list[dict[str, str]]:
    return list(_recent.records)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update({k: getattr(record, k) for k in FIELDS if hasattr(record, k)})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


def configure(level: int = logging.INFO, fmt: str = "text", quiet_libraries: bool = True) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler, _recent]
    root.setLevel(level)
    for name in NOISY:
        logging.getLogger(name).setLevel(logging.CRITICAL if quiet_libraries else logging.WARNING)
