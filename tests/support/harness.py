"""Real servers for tests: ZooKeeper, the pulsar-lite broker and an S3 server.

Like kazoo's ``testing/harness.py``: each server is a real process, listens on
127.0.0.1 on a free port, keeps its data and log in a temp dir, and is stopped
by the PID we started (never by name).  Logs are printed when a server fails to
start and kept on disk (``log_path``) for failing tests to show.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from deletion_service.embedded import broker as embedded_broker

ZOOKEEPER_JARS = ("/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-simple.jar")


def venv_tool(name: str) -> Path:
    """A console script of this interpreter's environment (``.venv/bin``): never one found on PATH,
    where a tool installed on the host could stand in for a missing or different one."""
    return Path(sys.executable).parent / name


def debian_tool(name: str) -> str | None:
    """A program of the Debian packages ``scripts/test.sh`` installs, at its packaged path (None if
    missing): not PATH's, where another install (``/usr/local/bin``, a shim) could come first."""
    path = Path("/usr/bin") / name
    return str(path) if path.is_file() else None


port_answers = embedded_broker.port_answers

#: Ports the suite's own servers and daemons listen on come from a band of 1,000 a test process
#: (xdist worker), below the kernel's ephemeral range: a port chosen by a test is then never handed
#: to another worker, nor to an outgoing connection or a product's own ``bind(0)`` (its embedded
#: broker), in the second or two before the process it was chosen for binds it.
PORT_BAND_START, PORT_BAND_SIZE = 20000, 1000
_next_in_band: list[int] = []


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def free_port() -> int:
    """A port free now, from this test process's band (see :data:`PORT_BAND_START`); the kernel's
    choice where the band would reach the ephemeral range (more workers than bands)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    start = PORT_BAND_START + (int(worker) if worker.isdigit() else 0) * PORT_BAND_SIZE
    if start + PORT_BAND_SIZE > _ephemeral_low():
        return embedded_broker.free_port()
    if not _next_in_band:
        _next_in_band.append(start + os.getpid() % PORT_BAND_SIZE)  # two runs at once start apart
    for _ in range(PORT_BAND_SIZE):
        port = start + (_next_in_band[0] - start) % PORT_BAND_SIZE
        _next_in_band[0] = port + 1
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use (a server of an earlier test, another run's)
            return port
    return embedded_broker.free_port()


def wait_until(check: Callable[[], bool], timeout: float, what: str, proc: subprocess.Popen | None = None,
               log_path: Path | None = None, interval: float = 0.05) -> None:
    """Poll ``check`` every ``interval`` seconds until it holds; fail after ``timeout`` naming ``what``.

    A longer ``interval`` suits a check that is itself a request to a server under test, so the
    waiting does not become the load."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before it was ready\n"
                               f"{_tail(log_path) or _piped_words(proc)}")
        if check():
            return
        time.sleep(interval)
    raise RuntimeError(f"{what} not ready within {timeout}s\n{_tail(log_path)}")


def poll(check: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Ask ``check`` every ``interval`` seconds until it holds (True) or ``timeout`` passes (False):
    for a wait whose end is not a failure, where ``wait_until`` would raise."""
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(interval, left))


def communicate_or_show_stacks(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """``proc.communicate(timeout)``; if it has not exited by then, SIGABRT makes it print every
    thread's stack (start it with ``PYTHONFAULTHANDLER=1``) and the failure shows where it hangs."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        out, err = proc.communicate(timeout=30)
        raise AssertionError(f"still running {timeout:g} s later; its threads then:\n{(err or '')[-8000:]}") from None


def _piped_words(proc: subprocess.Popen, limit: int = 4000) -> str:
    """What an exited process wrote to the pipes its starter gave it (the end of it): its reason to
    exit, where it has no log file of its own."""
    words = []
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None and not pipe.closed:
            try:
                text = pipe.read()
            except (OSError, ValueError):
                continue
            words.append(text.decode(errors="replace") if isinstance(text, bytes) else text)
    return "".join(words)[-limit:]


def _tail(path: Path | None, lines: int = 40) -> str:
    if path is None or not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class ServerProcess:
    """One started process: stopped by its own PID, SIGTERM then SIGKILL."""

    name: str
    workdir: Path
    port: int = 0
    proc: subprocess.Popen | None = None
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / f"{self.name}.log"

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} not started"
        return self.proc.pid

    def _spawn(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child for its lifetime
        self.proc = subprocess.Popen(
            argv, cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})}, start_new_session=True,
        )
        log.close()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def _await_ready(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        """``wait_until`` on this process; if it fails, the process is stopped: a server that never
        became ready must not outlive the test that started it (no fixture holds it yet)."""
        try:
            wait_until(check, timeout, what, self.proc, self.log_path)
        except BaseException:
            self.stop()
            raise

    def log_tail(self, lines: int = 40) -> str:
        return _tail(self.log_path, lines)


class ZooKeeperServer(ServerProcess):
    """A standalone ZooKeeper 3.8 from Debian's ``zookeeper`` package."""

    def __init__(self, workdir: Path) -> None:
        super().__init__("zookeeper", workdir)

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"zk://{self.hosts}"

    def start(self, port: int | None = None) -> ZooKeeperServer:
        missing = [j for j in ZOOKEEPER_JARS if not Path(j).exists()]
        if missing:
            raise RuntimeError(f"ZooKeeper jars missing ({', '.join(missing)}): apt-get install zookeeper")
        self.port = port or self.port or free_port()
        data = self.workdir / "data"
        data.mkdir(exist_ok=True)
        cfg = self.workdir / "zoo.cfg"
        cfg.write_text(
            "tickTime=500\ninitLimit=10\nsyncLimit=5\n"
            f"dataDir={data}\nclientPort={self.port}\nclientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\n4lw.commands.whitelist=srvr,ruok,mntr,conf\n"
            "maxClientCnxns=200\n"
        )
        self._spawn(["java", "-Xmx256m", "-cp", ":".join(ZOOKEEPER_JARS),
                     "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)])
        self._await_ready(lambda: self.serving() and self._is_ours(), 30, "ZooKeeper")
        return self

    def serving(self) -> bool:
        """Whether the server takes client sessions: ``srvr`` names its mode only then.

        Not ``ruok``: ZooKeeper answers ``imok`` as soon as its client port is bound, before its
        database is loaded; until then it closes every session it is offered, and a client backing
        off between attempts can spend its whole connect timeout on that gap."""
        return b"\nMode: " in self._ask(b"srvr")

    def _is_ours(self) -> bool:
        """Whether the server on our port keeps its data in our ``dataDir`` (``conf`` says): a port
        taken by another suite's ZooKeeper between choosing it and binding it would otherwise pass
        for ours, while ours exits for want of it."""
        return f"dataDir={self.workdir / 'data'}".encode() in self._ask(b"conf")

    def _ask(self, command: bytes) -> bytes:
        """A four-letter word's reply; empty when the port does not answer."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.3) as s:
                s.sendall(command)
                reply = b""
                while chunk := s.recv(4096):
                    reply += chunk
        except OSError:
            return b""
        return reply


class PulsarLiteBroker(ServerProcess):
    """The embedded Pulsar-protocol broker, started exactly as the product starts it."""

    def __init__(self, workdir: Path, default_partitions: int = 0) -> None:
        super().__init__("pulsar-lite", workdir)
        self.log_path = workdir / "broker.log"
        self.metrics_port = 0
        self.default_partitions = default_partitions

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def start(self) -> PulsarLiteBroker:
        # Ports are kept across restarts so clients can reconnect to the same URL.
        self.port = self.port or free_port()
        self.metrics_port = self.metrics_port or free_port()
        self.proc = embedded_broker.spawn(self.workdir, self.port, self.metrics_port, self.default_partitions)
        embedded_broker.wait_ready(self.proc, self.port, self.metrics_port, self.log_path)
        return self

    def metrics_text(self) -> str:
        with urllib.request.urlopen(self.metrics_url, timeout=5) as r:
            return r.read().decode()


class MotoS3Server(ServerProcess):
    """``moto_server``: a real S3-protocol HTTP server in its own process."""

    def __init__(self, workdir: Path) -> None:
        super().__init__("moto", workdir)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> MotoS3Server:
        self.port = self.port or free_port()
        self._spawn([str(venv_tool("moto_server")), "-H", "127.0.0.1", "-p", str(self.port)],
                    env={"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"})
        self._await_ready(self._answers, 30, "moto_server")
        return self

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=0.5):
                return True
        except OSError:
            return False

    def reset(self) -> None:
        """Forget every bucket and object (moto's own reset endpoint)."""
        req = urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST")
        with urllib.request.urlopen(req, timeout=5):
            pass


def unread_bytes(pid: int) -> int:
    """Bytes waiting, unread, in the receive queues of ``pid``'s TCP sockets (Linux ``/proc``): what
    clients have sent to a frozen process, which reads nothing."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # an fd closed meanwhile
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
    unread = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                unread += int(fields[4].split(":")[1], 16)  # tx_queue:rx_queue, in hex
    return unread
