"""Failpoints: parsed strictly, acted on at the N-th reach, and every name placed in the code."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from deletion_service import failpoints
from deletion_service.failpoints import POINTS, WATCHER_POINTS, FailpointError, failpoint

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _off():
    yield
    failpoints.configure("")


def test_every_failpoint_is_placed_exactly_where_its_name_says() -> None:
    placed: dict[str, int] = {}
    for path in [*(ROOT / "deletion_service").rglob("*.py")]:
        for name in re.findall(r'failpoint\("([a-z.-]+)"', path.read_text()):
            placed[name] = placed.get(name, 0) + 1
        for a, b in re.findall(r'failpoint\("([a-z.-]+)" if .* else "([a-z.-]+)"\)', path.read_text()):
            placed[a] = placed.get(a, 0) + 1
            placed[b] = placed.get(b, 0) + 1
    assert set(placed) == set(POINTS) | set(WATCHER_POINTS), \
        "a listed failpoint no code reaches, or a reached one not listed"


def test_bad_specs_are_reported_not_ignored() -> None:
    problems = failpoints.configure("trim.after-wrte=kill,delete.before-ack=explode,retry.after-publish=kill@x")
    assert len(problems) == 3
    assert "unknown failpoint 'trim.after-wrte'" in problems[0]
    assert all("expected NAME=" in p for p in problems[1:])


def test_an_action_fires_on_the_nth_reach_only() -> None:
    assert failpoints.configure("delete.before-ack=raise@3") == []
    failpoint("delete.before-ack")
    failpoint("delete.before-ack")
    failpoint("trim.after-write")  # another point: not active
    with pytest.raises(FailpointError, match="delete.before-ack"):
        failpoint("delete.before-ack")
    failpoint("delete.before-ack")  # the 4th: past it


def test_every_reach_with_at_zero() -> None:
    failpoints.configure("broker.starting=raise@0")
    for _ in range(3):
        with pytest.raises(FailpointError):
            failpoint("broker.starting")


def test_wait_for_holds_until_its_file_exists(tmp_path: Path) -> None:
    go = tmp_path / "go"
    assert failpoints.configure(f"delete.before-ack=wait-for:{go}") == []
    passed = threading.Event()
    waiter = threading.Thread(target=lambda: (failpoint("delete.before-ack"), passed.set()))
    waiter.start()
    assert not passed.wait(0.3)  # held: no file yet
    go.touch()
    assert passed.wait(10)
    waiter.join()
    assert failpoints.configure("delete.before-ack=wait-for:") == ["'delete.before-ack=wait-for:': expected NAME="
                                                                    "kill|exit|raise|sleep:SECONDS|wait-for:PATH[@N]"]
