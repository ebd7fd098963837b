"""The kill soak's product processes: the real CLI (``run``, ``trim``, ``cursor reset``, ``enqueue``).

Why subprocesses of the real CLI and not threads: a SIGKILL is only a fair
test when it kills everything the process held — its broker connections, its
locks on the data dir, its half-sent windows — and when what restarts is the
very command an operator (or a supervisor) would run.  Failpoints reach a
child through ``LEDGER_DELETION_FAILPOINTS`` in its environment, so each
process is armed (or not) when it starts.

Every process here is started by us and stopped by its own PID; the leak scan
(:func:`leaked_processes`) looks for anything still running whose command line
or working directory lies under the soak's temp dir.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from deletion_service.embedded.broker import EmbeddedBroker, alive, pids_serving
from deletion_service.failpoints import ENV as FAILPOINTS_ENV
from tests.support.harness import free_port

ROOT = Path(__file__).resolve().parents[3]
KILLED = -signal.SIGKILL


@dataclass
class Cli:
    """How every command of the soak is invoked: the common options and the environment."""

    data_dir: Path
    metadata_url: str
    bookkeeper_url: str
    config: Path
    logs: Path
    broker_url: str | None = None  # replicas: one external pulsar-lite; else the data dir's embedded broker

    def argv(self, *args: str) -> list[str]:
        broker = ["--broker-url", self.broker_url] if self.broker_url else []
        return [sys.executable, "-m", "deletion_service.cli.main", *args, "--data-dir", str(self.data_dir),
                "--metadata-store", self.metadata_url, "--bookkeeper-metadata-store", self.bookkeeper_url,
                "--config", str(self.config), *broker]

    def env(self, failpoint: str | None = None) -> dict[str, str]:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
               "AWS_DEFAULT_REGION": "us-east-1"}
        env.pop(FAILPOINTS_ENV, None)
        if failpoint:
            env[FAILPOINTS_ENV] = failpoint
        return env

    def popen(self, *args: str, failpoint: str | None = None, log_name: str = "cli") -> subprocess.Popen:
        log = open(self.logs / f"{log_name}.log", "ab")  # noqa: SIM115 - handed to the child for its lifetime
        log.write(f"\n=== {' '.join(args)} failpoint={failpoint} at {time.time():.3f}\n".encode())
        log.flush()
        try:
            return subprocess.Popen(self.argv(*args), stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                                    env=self.env(failpoint), cwd=self.logs)
        finally:
            log.close()

    def run(self, *args: str, failpoint: str | None = None, timeout: float = 120,
            log_name: str = "cli") -> tuple[int, str]:
        """(exit code, stdout); a command that hangs past ``timeout`` is killed and reported as 124."""
        proc = self.popen(*args, failpoint=failpoint, log_name=log_name)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            return 124, out.decode(errors="replace")
        return proc.returncode, out.decode(errors="replace")


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


@dataclass
class Daemon:
    """One ``run`` process of its data dir; restarted (maybe armed with a failpoint) after each death."""

    cli: Cli
    name: str = "daemon"  # its log's name; a replica's own
    proc: subprocess.Popen | None = None
    port: int = 0
    armed: str | None = None  # the failpoint spec it was started with
    started_at: float = 0.0
    exits: Counter = field(default_factory=Counter)  # how incarnations ended: killed, exit codes
    shutdown_s: list[float] = field(default_factory=list)  # SIGTERM to exit, per graceful stop

    def start(self, failpoint: str | None = None) -> None:
        self.port, self.armed, self.started_at = free_port(), failpoint, time.monotonic()
        self.proc = self.cli.popen("run", "--admin-address", f"127.0.0.1:{self.port}", failpoint=failpoint,
                                   log_name=self.name)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def ready(self) -> bool:
        return self.running() and http_ok(f"http://127.0.0.1:{self.port}/readyz")

    def wait_ready(self, timeout: float = 90) -> float | None:
        """Seconds until /readyz answers 200, or None if it died or did not within ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ready():
                return time.monotonic() - self.started_at
            if not self.running():
                return None
            time.sleep(0.1)
        return None

    def wait_exit(self, timeout: float) -> int | None:
        if self.proc is None:
            return None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout)
        return self.proc.poll()

    def reap(self) -> None:
        """Note how the last incarnation ended (a process that exited on its own is not left unreaped)."""
        if self.proc is not None and self.proc.poll() is not None:
            self.exits["killed" if self.proc.returncode == KILLED else f"exit {self.proc.returncode}"] += 1
            self.proc = None

    def kill(self) -> None:
        if self.running():
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM and wait (the issue's bound is 20 s); SIGKILL past ``timeout``."""
        if not self.running():
            self.reap()
            return None
        assert self.proc is not None
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.shutdown_s.append(time.monotonic() - t0)
        code = self.proc.returncode
        self.reap()
        return code


@dataclass
class TrimOutcome:
    topic: str
    code: int
    result: dict | None
    failpoint: str | None
    started: float
    ended: float


class TrimDriver(threading.Thread):
    """Runs ``trim --offline --json`` over the topics, one after another, for as long as the soak runs.

    ``arm`` hands the next trim a failpoint; ``outcomes`` keeps every trim's exit.  ``current``
    is the running trim, for a random kill.  A trim killed by its failpoint is re-run on the same
    topic at once (restart what was killed), which is also how its recovery is timed.  ``held``
    orders another command after the running trim and before the next one: what it reads from
    the ledger lists cannot be trimmed away under it while it holds them."""

    def __init__(self, cli: Cli, topics: list[str], pick: Callable[[list[str]], str]) -> None:
        super().__init__(name="soak-trim", daemon=True)
        self.cli, self.topics, self.pick = cli, topics, pick
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.turn = threading.Lock()  # held by each trim while it runs, and by ``held``
        self.armed: str | None = None
        self.current: subprocess.Popen | None = None
        self.outcomes: list[TrimOutcome] = []
        self.codes: Counter = Counter()

    def arm(self, spec: str | None) -> None:
        with self.lock:
            self.armed = spec

    def run(self) -> None:
        redo: str | None = None
        while not self.stop_event.is_set():
            topic = redo or self.pick(self.topics)
            with self.turn:
                with self.lock:
                    spec = self.armed  # stays armed until the soak disarms it (it saw the kill, or gave up)
                outcome = self._trim(topic, spec)
            redo = topic if outcome.code == KILLED else None
            self.stop_event.wait(0.05)

    def _trim(self, topic: str, spec: str | None) -> TrimOutcome:
        started = time.monotonic()
        proc = self.cli.popen("trim", "--topic", topic, "--offline", "--json", failpoint=spec, log_name="trim")
        with self.lock:
            self.current = proc
        try:
            out, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        with self.lock:
            self.current = None
        result = None
        if proc.returncode == 0:
            with contextlib.suppress(ValueError):
                result = json.loads(out.decode().strip().splitlines()[-1])
        outcome = TrimOutcome(topic, proc.returncode, result, spec, started, time.monotonic())
        with self.lock:
            self.outcomes.append(outcome)
            self.codes["killed" if proc.returncode == KILLED else f"exit {proc.returncode}"] += 1
        return outcome

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """No trim runs inside: the running one (if any) ends first, the next starts after."""
        with self.turn:
            yield

    def kill_current(self) -> bool:
        with self.lock:
            proc = self.current
        if proc is None or proc.poll() is not None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        return True

    def since(self, index: int) -> list[TrimOutcome]:
        with self.lock:
            return list(self.outcomes[index:])

    def count(self) -> int:
        with self.lock:
            return len(self.outcomes)


def broker_pids(data_dir: Path) -> list[int]:
    return pids_serving(EmbeddedBroker(data_dir).db_path)


def leaked_processes(root: Path, exclude: set[int]) -> list[str]:
    """Every live process (not ours to keep) whose command line or working directory is under ``root``."""
    found = []
    skip = exclude | _ancestors()  # whoever started the soak may name its dir on their command line
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if (str(root) in cmd or cwd.startswith(str(root))) and alive(int(entry.name)):
            found.append(f"{entry.name}: {cmd[:160]}")
    return found


def _ancestors() -> set[int]:
    """This process and every parent up to init."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return pids
