"""Leadership on real ZooKeeper (kazoo's lock recipe): one holder among contenders, the next in line
takes over when the holder gives up or its process dies, and a holder whose connection is
interrupted stops believing it holds the role at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from metastore import open_store
from tests.support.harness import ZooKeeperServer
from tests.support.reply_drop_proxy import ReplyDropProxy

ROLE = "/ledger-deletion/leak-watcher/leader"


def _until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.05)


def test_one_of_three_holds_and_the_next_takes_over_when_it_gives_up(zk_url: str) -> None:
    stores = [open_store(zk_url) for _ in range(3)]
    try:
        roles = [s.leadership(ROLE, f"replica-{n}") for n, s in enumerate(stores)]
        _until(lambda: sum(r.holds() for r in roles) == 1, 10, "one holder")
        holder = next(r for r in roles if r.holds())
        assert {r.holder() for r in roles} == {holder.identifier}  # every replica names the same holder
        holder.close()
        rest = [r for r in roles if r is not holder]
        _until(lambda: sum(r.holds() for r in rest) == 1, 10, "a successor")
        assert not holder.holds()
        for r in rest:
            r.close()
    finally:
        for s in stores:
            s.close()


_CONTENDER = """
import sys, time
from metastore import open_store
store = open_store(sys.argv[1], connect_timeout_s=10)
role = store.leadership(sys.argv[2], "child")
while not role.holds():
    time.sleep(0.05)
print("holding", flush=True)
time.sleep(600)
"""


def test_a_holder_killed_with_sigkill_is_succeeded_within_the_session_timeout(zk_url: str) -> None:
    child = subprocess.Popen([sys.executable, "-c", _CONTENDER, zk_url, ROLE], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "holding"
        with open_store(zk_url) as store:
            role = store.leadership(ROLE, "successor")
            time.sleep(0.5)
            assert not role.holds() and role.holder() == "child"  # queued behind the holder
            os.kill(child.pid, signal.SIGKILL)
            killed = time.monotonic()
            _until(role.holds, 20, "the successor holds the role")
            assert time.monotonic() - killed <= 12  # the session timeout is 10 s
            assert role.holder() == "successor"
            role.close()
    finally:
        child.kill()
        child.wait(10)


def test_a_holder_cut_off_from_zookeeper_stops_holding_before_another_takes_over(zookeeper: ZooKeeperServer,
                                                                                  zk_url: str) -> None:
    chroot = zk_url[len(zookeeper.url):]
    proxy = ReplyDropProxy(zookeeper.port)
    try:
        with open_store(zk_url) as other:
            cut_store = open_store(f"zk://127.0.0.1:{proxy.port}{chroot}")
            try:
                cut = cut_store.leadership(ROLE, "cut")
                _until(cut.holds, 10, "the first contender holds")
                waiting = other.leadership(ROLE, "waiting")
                proxy.silence()  # the holder's network goes silent; ZooKeeper will expire its session
                silenced = time.monotonic()
                _until(lambda: not cut.holds(), 12, "the cut-off holder lets go")
                let_go = time.monotonic()
                _until(waiting.holds, 30, "the other replica takes over once the session expires")
                assert let_go <= time.monotonic() and let_go - silenced < 10  # before the session could expire
                assert not cut.holds()
                proxy.silence(False)  # back: the cut-off replica contends again, behind the new holder
                _until(lambda: cut.holder() == "waiting", 30, "the cut-off replica sees the new holder")
                assert not cut.holds()
                waiting.close()
                _until(cut.holds, 15, "the first replica holds again once the other gives up")
            finally:
                cut_store.close()
    finally:
        proxy.close()
