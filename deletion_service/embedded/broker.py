"""The embedded broker: a supervised ``pulsar-lite`` process under ``<data-dir>/broker``.

pulsar-lite binds its metrics endpoint to 0.0.0.0:8080 unless told otherwise,
so we always write our own TOML with loopback addresses on free ports.  A
``broker.json`` records {pid, serviceUrl, metricsUrl} so the next CLI call can
reuse a running broker instead of starting a second one on the same data —
but only when the pid is alive, its command line names this data dir and its
port answers; a stale pid of ours is killed and replaced.

Finding or starting happens under ``broker/broker.lock`` (:mod:`.lock`), so two
commands never start two brokers on one database.  ``broker.json`` is written
as soon as the process exists, and every broker of this data dir is also found
by its command line in ``/proc``: one left by a command killed before it could
write anything is still found, and reused or stopped, never doubled or leaked.
While a daemon holds ``daemon.lock``, other commands never stop its broker.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from deletion_service.errors import UserError
from deletion_service.failpoints import failpoint

from . import db_lock
from .lock import BROKER_LOCK, DAEMON_LOCK, DataDirLock


@dataclass(frozen=True)
class BrokerInfo:
    pid: int
    serviceUrl: str  # noqa: N815 - the broker.json contract's spelling
    metricsUrl: str  # noqa: N815

    @property
    def port(self) -> int:
        return int(self.serviceUrl.rsplit(":", 1)[1])


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` ports free now, all different: each is held bound until all are chosen (two calls in
    a row may be given the same port back once the first is closed)."""
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(count):
            s = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind(("127.0.0.1", 0))
            ports.append(int(s.getsockname()[1]))
        return ports


def port_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.3):
            return True
    except OSError:
        return False


def binary() -> str:
    try:
        from pulsar_lite.binary_finder import find_pulsar_lite_binary
    except ImportError as e:  # pragma: no cover - a broken install
        raise UserError("pulsar-lite is not installed: pip install pulsar-lite") from e
    return str(find_pulsar_lite_binary())


def write_config(broker_dir: Path, metrics_port: int, default_partitions: int = 0) -> Path:
    cfg = broker_dir / "pulsar-lite.toml"
    cfg.write_text(
        f"default_partitions = {default_partitions}\n"
        f'[metrics]\nenabled = true\naddr = "127.0.0.1:{metrics_port}"\n'
    )
    return cfg


def spawn(broker_dir: Path, port: int, metrics_port: int, default_partitions: int = 0) -> subprocess.Popen:
    """Start pulsar-lite detached (its own session), logging to ``broker_dir/broker.log``."""
    broker_dir.mkdir(parents=True, exist_ok=True)
    cfg = write_config(broker_dir, metrics_port, default_partitions)
    with open(broker_dir / "broker.log", "ab") as log:
        return subprocess.Popen(
            [binary(), "--config", str(cfg), "--addr", f"127.0.0.1:{port}", "--db-path", str(broker_dir / "db")],
            cwd=broker_dir, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "info")}, start_new_session=True,
        )


def wait_ready(proc: subprocess.Popen, port: int, metrics_port: int, log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise UserError(f"embedded broker exited with {proc.returncode} at start; see {log}")
        if port_answers(port) and port_answers(metrics_port):
            return
        time.sleep(0.05)
    stop_pid(proc.pid)
    raise UserError(f"embedded broker did not answer on 127.0.0.1:{port} within {timeout:g}s; see {log}")


def stop_pid(pid: int, timeout: float = 10) -> None:
    """SIGTERM, then SIGKILL after ``timeout``; only ever called with a pid we started.

    SIGCONT follows the SIGTERM: a stopped (frozen) process acts on no signal but SIGKILL, and
    would otherwise cost the whole timeout."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        os.kill(pid, signal.SIGCONT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    """Running, not merely a zombie: a broker whose parent died is nobody's child to reap,
    and in a container without an init its zombie lingers though it serves nothing."""
    try:
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return False  # our own child, now reaped
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        if "zombie" not in Path(f"/proc/{pid}/status").read_text().lower():
            return True
        # A zombie main thread is not yet a dead process: its other threads may still be exiting,
        # holding its files (the database lock among them).  Gone only once it is alone.
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return True  # no /proc: trust the signal check


def _serves(pid: int, db_path: Path) -> bool:
    """``pid`` is a pulsar-lite whose command line names ``db_path`` as its database (as :func:`spawn` does)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return False
    wanted = ["--db-path", str(db_path)]
    return Path(args[0]).name == "pulsar-lite" and any(args[i:i + 2] == wanted for i in range(len(args) - 1))


def pids_serving(db_path: Path) -> list[int]:
    """Every live pulsar-lite whose command line names ``db_path`` (found even without broker.json)."""
    return sorted(pid for pid in (int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit())
                  if _serves(pid, db_path) and alive(pid))


class EmbeddedBroker:
    """Find or start the broker of one data dir."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.broker_dir = self.data_dir / "broker"
        self.info_path = self.broker_dir / "broker.json"
        self.owned = False  # True when this object started the process
        self.info: BrokerInfo | None = None
        self.broker_lock = DataDirLock(self.broker_dir / BROKER_LOCK)
        self.daemon_lock = DataDirLock(self.data_dir / DAEMON_LOCK)

    @property
    def db_path(self) -> Path:
        return self.broker_dir / "db"

    def claim(self, what: str) -> None:
        """For run/demo: this data dir is ours until we exit; a second one is refused, naming our pid."""
        self.daemon_lock.acquire(what)

    def read_info(self) -> BrokerInfo | None:
        try:
            return BrokerInfo(**json.loads(self.info_path.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def is_ours_and_alive(self, info: BrokerInfo) -> bool:
        return alive(info.pid) and _serves(info.pid, self.db_path)

    def ensure(self) -> BrokerInfo:
        """Reuse the running broker of this data dir, or replace a stale one with a fresh start."""
        with self.broker_lock.hold():
            info = self.read_info()
            if info is not None and self.is_ours_and_alive(info) and port_answers(info.port):
                self.info = info
                return info
            daemon = self.daemon_lock.held_elsewhere()  # a daemon owns this data dir's broker (not us)
            if daemon is not None:  # its broker is its own to restart: never start a second beside it
                raise UserError(f"the daemon (pid {daemon}) on data dir {self.data_dir} has no answering broker "
                                "right now (it restarts it); try again in a few seconds")
            for pid in pids_serving(self.db_path):
                stop_pid(pid)  # left by a killed command: ours (its command line names our database)
            return self._start_locked()

    def replace(self, port: int | None = None, metrics_port: int | None = None) -> BrokerInfo:
        """For the commands that own the broker (run, demo): a broker left running by a
        killed command is stopped (it is ours: its command line names this data dir's
        database) and a fresh one started, so its lifetime is this command's."""
        with self.broker_lock.hold():
            for pid in pids_serving(self.db_path):
                stop_pid(pid)
            return self._start_locked(port, metrics_port)

    def restart(self) -> BrokerInfo:
        """The owner's broker died: start it again on the same ports, so clients reconnect to the same URL."""
        assert self.info is not None and self.owned
        old = self.info
        return self.replace(old.port, int(old.metricsUrl.rsplit(":", 1)[1].split("/", 1)[0]))

    def _make_broker_dir(self) -> None:
        try:
            self.broker_dir.mkdir(parents=True, exist_ok=True)
        except PermissionError as e:
            raise UserError(f"cannot create {self.broker_dir}: permission denied; choose another --data-dir") from e

    def start(self) -> BrokerInfo:
        with self.broker_lock.hold():
            return self._start_locked()

    def _start_locked(self, port: int | None = None, metrics_port: int | None = None) -> BrokerInfo:
        self._make_broker_dir()
        db_lock.wait_free(self.db_path)  # the broker just stopped may still be letting go of it
        chosen = free_ports(2)
        port, metrics_port = port or chosen[0], metrics_port or chosen[1]
        proc = spawn(self.broker_dir, port, metrics_port)
        info = BrokerInfo(proc.pid, f"pulsar://127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}/metrics")
        self.info_path.write_text(json.dumps(asdict(info)) + "\n")  # before it answers: a kill now leaves a trace
        self.owned, self.info = True, info
        failpoint("broker.starting")
        wait_ready(proc, port, metrics_port, self.broker_dir / "broker.log")
        return info

    def process_alive(self) -> bool:
        """The broker this object started still runs (the supervisor's question)."""
        return self.info is not None and alive(self.info.pid)

    # pulsar-lite refuses a second process's consumer on a subscription a live daemon
    # consumes, so "create the subscription by subscribing" cannot work from a CLI call
    # while the daemon runs.  The broker keeps subscriptions in its database; we keep a
    # note of the ones known to exist beside it, so other commands need not subscribe.

    @property
    def subscriptions_path(self) -> Path:
        return self.broker_dir / "subscriptions.json"

    def record_subscriptions(self, pairs: list[tuple[str, str]]) -> None:
        known = self._subscriptions() | {f"{t} {s}" for t, s in pairs}
        self.subscriptions_path.write_text(json.dumps(sorted(known)) + "\n")

    def subscription_known(self, topic: str, subscription: str) -> bool:
        return f"{topic} {subscription}" in self._subscriptions()

    def _subscriptions(self) -> set[str]:
        try:
            return set(json.loads(self.subscriptions_path.read_text()))
        except (OSError, ValueError):
            return set()

    # pulsar-lite keeps no partitioned-topic metadata: producers and consumers address
    # ``<base>-partition-N`` by name, so nothing in the broker says how many partitions the
    # request topic has, and a daemon configured with fewer partitions than a CLI call sent to
    # would never read the others.  So the count this data dir was first used with is noted
    # beside the broker's database — it describes that database's topics, and is removed with
    # it when broker/ is — and every command that sends or consumes requests compares (see
    # ``cli.connections.check_partitions``).  Not the metadata store: with --metadata-store an
    # external ZooKeeper can serve several data dirs, each with its own broker.

    @property
    def partitions_path(self) -> Path:
        return self.broker_dir / "partitions.json"

    def recorded_partitions(self, topic: str, partitions: int) -> int:
        """The partition count ``topic`` was first used with in this data dir.  On first use
        that is ``partitions``, recorded now (atomically: a reader never sees half a file)."""
        recorded = self._partitions()
        if topic in recorded:
            return recorded[topic]
        self._make_broker_dir()
        try:
            tmp = self.partitions_path.with_name(f".partitions.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({**recorded, topic: partitions}, indent=2, sort_keys=True) + "\n")
            os.replace(tmp, self.partitions_path)
        except OSError as e:
            raise UserError(f"cannot record the partition count in {self.partitions_path}: {e.strerror}") from e
        return partitions

    def _partitions(self) -> dict[str, int]:
        try:
            recorded = json.loads(self.partitions_path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise UserError(f"cannot read {self.partitions_path} ({e}): it records the partition count of the "
                            "deletion topic; restore it, or remove it if you know the count matches") from e
        if not isinstance(recorded, dict) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in recorded.values()):
            raise UserError(f"{self.partitions_path} is not a map of topic to partition count; restore it, or "
                            "remove it if you know the count matches")
        return recorded

    def stop(self) -> None:
        """Stop the broker if this object started it, and forget it in ``broker.json`` only if that
        still names it: a daemon may have replaced our temporary broker meanwhile (found by the
        soak: removing the daemon's record made every later trim on the data dir fail)."""
        if self.owned and self.info is not None:
            with self.broker_lock.hold():
                stop_pid(self.info.pid)
                if self.read_info() == self.info:
                    with contextlib.suppress(FileNotFoundError):
                        self.info_path.unlink()
            self.owned = False
