"""``GET /status``: what the daemon has in hand, what waits and until when, recent problems, dependencies.

The metrics answer "how many, over time"; an operator paged at night asks "what
is it doing right now, and what went wrong last?".  This answers that in one
read, for ``ledger-deletion status`` and for a human with curl.  Read-only and,
like ``/metrics``, unauthenticated: it names counts, times and log lines, never
secrets.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import FastAPI

from deletion_service import logs
from deletion_service.admin.deps import AdminDeps
from deletion_service.inflight import NO_SOURCE, UNDELIVERED_REMEDY, NoBacklog
from deletion_service.leak_watcher.role import WatcherStatus

STATUS_PATH = "/status"

STATUS_DOC: dict[str, Any] = {
    "tags": ["health"],
    "summary": "What the daemon is doing now",
    "description": "Requests in hand, held for a retry delay (and until when; `heldBy`: how many wait for "
                   "each reason, and when the first and last of them fall due), held through a dependency "
                   "outage, waiting for the broker to take their disposition; the leak watcher (whether this "
                   "replica watches, which one does, when its last pass began and how far behind it is); the "
                   "last warnings and errors; and whether each dependency answers (the same probes as `/readyz`).",
}


def _iso(seconds: float | None) -> str | None:
    return None if seconds is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def status(deps: AdminDeps) -> dict[str, Any]:
    worker = deps.service.worker if deps.service is not None else None
    in_hand: dict[str, Any] = {"running": worker is not None}
    if worker is not None:
        lane = worker.offload_lane
        now = worker.in_hand()
        in_hand.update(busy=worker.busy, held=now.not_yet_due, heldUntil=_iso(now.not_yet_due_until),
                       heldBy=[{"reason": g.reason.value, "why": g.reason.label, "count": g.count,
                                "firstDue": _iso(g.first_due_ms / 1000), "lastDue": _iso(g.last_due_ms / 1000),
                                "example": g.example} for g in worker.intake.not_yet_due.groups()],
                       onHold=now.paused, undisposed=now.awaiting_next_try,
                       offloadLane=lane.in_flight if lane is not None else 0,
                       dependenciesDown=worker.dependencies_down())
    checks = deps.readiness()
    return {
        "inHand": in_hand,
        "leakWatcher": _leak_watcher(deps.leak_watcher()),
        "dependencies": {name: why or "ok" for name, why in checks.items()},
        "recentProblems": logs.recent_problems(),
        "undelivered": _undelivered(deps),
    }


def _undelivered(deps: AdminDeps) -> dict[str, Any]:
    """This replica's last judgement of requests waiting that no consumer receives (the ``undelivered`` gauge),
    or why there is none."""
    if isinstance(deps.backlog, NoBacklog) or deps.service is None:
        return {"known": False, "why": NO_SOURCE}
    gauge = deps.service.metrics.undelivered
    if gauge.value is None:
        return {"known": False, "why": "the broker's statistics were not read yet (or cannot be: see the log)"}
    count = int(gauge.value)
    return {"known": True, "count": count, "byTopic": dict(gauge.by_topic),
            "quietSeconds": {t: round(q) for t, q in gauge.quiet_s.items()},
            "remedy": UNDELIVERED_REMEDY if count else None}


def _leak_watcher(state: WatcherStatus | None) -> dict[str, Any]:
    if state is None:
        return {"enabled": False}
    return {"enabled": True, "watching": state.watching, "watcher": state.holder,
            "lastPass": _iso(state.last_pass_at),
            "lagSeconds": None if state.lag_s is None else round(state.lag_s, 1),
            "waitingToSettle": state.waiting, "settleSeconds": state.settle_s}


def add_status_route(app: FastAPI, deps: AdminDeps) -> None:
    @app.get(STATUS_PATH, **STATUS_DOC)
    def get_status() -> dict[str, Any]:
        return status(deps)
