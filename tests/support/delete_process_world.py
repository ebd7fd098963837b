"""The world of the tests of the daemon's delete process, driven from outside: real ``run`` processes
(``tests/support/replicas_world.py``), signals sent to the daemon and to its child, the shared ZooKeeper
and pulsar-lite."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from deletion_service.inflight import parse_backlog_metrics
from tests.support.harness import PulsarLiteBroker, wait_until
from tests.support.replicas_world import Replica, ReplicaWorld

#: What the daemon's log says once its delete process runs (its start line names the child's pid).
STARTED = "BookKeeper requests decided in"

#: The daemon's log line once a gate holds its delete process's batch (``failpoint NAME: wait-for``).
HELD = "failpoint delete.before-storage: wait-for"


@dataclass(frozen=True)
class Gate:
    """A failpoint that holds a delete process where it is named until the test opens the gate: the
    test does what it must while the batch is held, however loaded the machine.  (A ``sleep`` only gave
    it time: a test that was late found the batch deleted.)  Every delete process of the daemon, the
    ones that replace a killed child too, stops at it once, until it is open."""

    path: Path

    def at(self, point: str = "delete.before-storage") -> str:
        """The failpoint spec for ``started``."""
        return f"{point}=wait-for:{self.path}@1"

    def open(self) -> None:
        self.path.touch()


def gate(world: ReplicaWorld, name: str = "gate") -> Gate:
    return Gate(world.root / name)



@dataclass
class DeleteProcessWorld(ReplicaWorld):
    """:class:`ReplicaWorld` that remembers every delete process its daemons started, to end any left behind."""

    children_seen: set[int] = field(default_factory=set)

    def close(self) -> None:
        for replica in self.replicas:
            self.children_seen.update(all_children(replica))
        super().close()
        for pid in self.children_seen:  # started by a daemon this test started: ours to end
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def world(tmp_path: Path, zk_url: str, module_pulsar_lite: PulsarLiteBroker) -> Iterator[DeleteProcessWorld]:
    """A fresh chroot and topic on the session's servers; its replicas SIGKILLed at the end, then any
    delete process they left behind (so a leak one test finds does not outlive it)."""
    w = DeleteProcessWorld(tmp_path, zk_url, module_pulsar_lite.service_url)
    yield w
    w.close()


def log(world: ReplicaWorld, replica: Replica) -> str:
    return (world.root / f"{replica.name}.log").read_text(errors="replace")


def all_children(replica: Replica) -> list[int]:
    """Every live child of the daemon (listed under any of its threads), zombies left out."""
    if replica.proc is None or replica.proc.poll() is not None:
        return []
    return children_of(replica.proc.pid)


def children_of(pid: int) -> list[int]:
    """Every live child of process ``pid`` (listed under any of its threads), zombies left out."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return [child for child in found if not gone(child)]


def delete_process(replica: Replica) -> int | None:
    """The daemon's delete process: its one Python child (its command line carries the marker)."""
    found = [pid for pid in all_children(replica) if _spawned(pid)]
    assert len(found) <= 1, found
    return found[0] if found else None


def _spawned(pid: int) -> bool:
    try:
        return b"ledger-deletion-delete-process" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def state(pid: int) -> str | None:
    """The process's state letter (R, S, T, Z, ...), or None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def gone(pid: int) -> bool:
    """Exited: no such process, or a zombie (it runs nothing)."""
    return state(pid) in (None, "Z")


def started(world: DeleteProcessWorld, replica: Replica, failpoint: str | None = None, own_group: bool = False) -> int:
    """Start ``replica`` (leading a process group of its own with ``own_group``), wait for /readyz and its
    start line; its delete process's pid."""
    (start_in_own_group(replica, failpoint) if own_group else replica.start(failpoint)).wait_ready()
    wait_until(lambda: STARTED in log(world, replica), 30, "the start line")
    child = delete_process(replica)
    assert child is not None, log(world, replica)[-2000:]
    world.children_seen.add(child)
    return child


def received(replica: Replica) -> int:
    """Requests the daemon's delete phase has taken from the broker so far (its /metrics)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{replica.port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(int(sample.value) for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == "pulsar_ledger_deletion_received_total")


def readyz_text(replica: Replica) -> str:
    """``/readyz``'s body ("" when it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{replica.port}/readyz", timeout=5) as r:
            return r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.read().decode(errors="replace")
    except OSError:
        return ""


def readyz(replica: Replica) -> int:
    """``/readyz``'s status code (0: no answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{replica.port}/readyz", timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


@contextmanager
def stopped(pid: int) -> Iterator[None]:
    """``pid`` SIGSTOPped for the block, SIGCONTed after (if it still exists)."""
    os.kill(pid, signal.SIGSTOP)
    wait_until(lambda: state(pid) in ("T", "t", None, "Z"), 5, "the process stopped")
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def sigterm_seconds(replica: Replica, bound: float = 40) -> tuple[float, int | None]:
    """SIGTERM the daemon; (seconds until it exited, its exit code), SIGKILLed past ``bound``."""
    assert replica.proc is not None
    t0 = time.monotonic()
    code = replica.stop(signal.SIGTERM, timeout=bound)
    return time.monotonic() - t0, code


def zookeeper_port(world: ReplicaWorld) -> int:
    return int(world.zk_url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])


def zookeeper_connections(pid: int, port: int) -> int:
    """How many established TCP connections process ``pid`` holds to ZooKeeper.  A stopped process
    cannot close one: its count drops when ZooKeeper closes the connection, as it does when it
    expires the connection's session."""
    listing = subprocess.run(["ss", "-Htnp", "state", "established", "dport", "=", f":{port}"],
                             capture_output=True, text=True, check=True).stdout
    return sum(f"pid={pid}," in line for line in listing.splitlines())


def wait_sessions_expired(pid: int, port: int, timeout: float = 40) -> None:
    """Until ZooKeeper has expired every session the stopped process ``pid`` held (it closed their
    connections); the process must have held one."""
    assert zookeeper_connections(pid, port) > 0, f"process {pid} holds no ZooKeeper connection"
    wait_until(lambda: zookeeper_connections(pid, port) == 0, timeout,
               f"ZooKeeper expiring the sessions of stopped process {pid}", interval=0.5)


def cut_zookeeper(pid: int, port: int) -> int:
    """Reset every TCP connection process ``pid`` holds to ZooKeeper (``ss -K``, as a network fault would):
    that process's connections only, the daemon's own are untouched.  How many were cut."""
    listing = subprocess.run(["ss", "-Htnp", "state", "established", "dport", "=", f":{port}"],
                             capture_output=True, text=True, check=True).stdout
    local_ports = [line.split()[2].rsplit(":", 1)[1] for line in listing.splitlines() if f"pid={pid}," in line]
    for local in local_ports:
        subprocess.run(["ss", "-K", "state", "established", "sport", "=", f":{local}", "dport", "=", f":{port}"],
                       capture_output=True, check=True)
    return len(local_ports)


def start_in_own_group(replica: Replica, failpoint: str | None = None) -> Replica:
    """``replica.start`` with the daemon leading a process group of its own (Ctrl-C, ``KillMode=control-group``)."""
    return replica.start(failpoint, own_group=True)


def signal_group(replica: Replica, sig: int) -> float:
    """Send ``sig`` to the daemon's whole process group; the monotonic time it was sent."""
    assert replica.proc is not None
    os.killpg(replica.proc.pid, sig)
    return time.monotonic()


def backlog_by_topic(world: ReplicaWorld, broker: PulsarLiteBroker) -> dict[str, int]:
    """Topic → requests the broker holds unacknowledged on it, for ``world``'s topics (partitions and
    RETRY), from one snapshot of its metrics."""
    counts = parse_backlog_metrics(broker.metrics_text(), "ledger-deletion")
    return {topic: n for topic, n in counts.items() if f"__ld_{world.tag}" in topic}


def backlog(world: ReplicaWorld, broker: PulsarLiteBroker) -> int:
    """Requests of ``world``'s topics (partitions and RETRY) the broker holds unacknowledged, by its metrics."""
    return sum(backlog_by_topic(world, broker).values())


def wait_acked(world: ReplicaWorld, broker: PulsarLiteBroker, timeout: float = 60) -> None:
    """Every request acknowledged (a request stranded unacked in a daemon is lost until it restarts)."""
    wait_until(lambda: backlog(world, broker) == 0, timeout, "every request acknowledged", interval=0.5)


def next_child(replica: Replica, old: int, timeout: float = 60) -> int:
    """The delete process the daemon starts after ``old`` died."""
    wait_until(lambda: delete_process(replica) not in (None, old), timeout, "a new delete process", replica.proc)
    child = delete_process(replica)
    assert child is not None
    return child
