"""The kill soak itself: every failpoint in turn and random kills under load, then a drain and the verdict.

Shape of a run (``run_soak``):

1. start ZooKeeper and moto_server, build the cluster (``tests.support.soak.cluster``), start the daemon;
2. in the background: the "broker" grows the topics (new ledgers, offloads, cursors moving on,
   now and then an unlisted ledger with an orphan request and a probe: a ``manual`` request for
   a ledger still listed, which must never be deleted); ``trim`` runs over the topics one after
   another; an observer checks invariant 1 every couple of seconds;
3. for each of the N kills, by a fixed plan: two kills at failpoints (each in turn, on the
   process that reaches it), then one SIGKILL at a random moment of a random process (daemon,
   a running trim, the embedded broker); after each, what was killed is restarted and the time
   until it serves again is the fault's recovery time;
4. stop the background, SIGTERM the daemon (timed: the bound is 20 s), drain with
   ``run --exit-when-idle``, judge from the stores, stop the servers, look for leaked processes.

Why the plan alternates: failpoints prove each step survives a crash *exactly there*; random
kills reach the places nobody thought to name.  The seed fixes every choice the soak makes
(not the scheduling of the processes), and is printed.

With ``replicas`` > 1 the same run has N daemons on one external pulsar-lite process
(``tests.support.soak.fleet``): each daemon fault hits one replica chosen by the seed while the others
keep consuming, a random broker kill kills that one broker (the soak restarts it), the drain runs
``--exit-when-idle`` in every replica's data dir at once, and ``broker.starting`` (the embedded
broker's) is not planned.  Whatever the count, the verdict adds a third invariant: no request is
named ``deleted`` twice across all the audit trails.
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pulsar

from deletion_service.embedded.broker import alive
from deletion_service.failpoints import POINTS
from tests.support.harness import poll, port_answers
from tests.support.soak.cluster import ClusterState, Servers
from tests.support.soak.fleet import EMBEDDED_ONLY, Fleet, deleted_twice
from tests.support.soak.processes import KILLED, Cli, Daemon, TrimDriver, TrimOutcome, broker_pids, leaked_processes

#: Which process reaches each failpoint (the soak arms that one).
TARGET = {
    "send.before-receipt": "trim", "trim.after-receipts": "trim", "trim.after-write": "trim",
    "delete.before-storage": "daemon", "delete.between-bookkeeper-and-offload": "daemon",
    "delete.before-ack": "daemon", "retry.after-publish": "daemon", "dlq.after-publish": "daemon",
    "cursor.reset-before-write": "reset", "broker.starting": "daemon",
}
assert set(TARGET) == set(POINTS), "a failpoint the soak does not know how to reach"
REQUEST_TOPIC = "persistent://pulsar/system/__soak_deletion"
#: A random kill waits this long for its target (a running trim; the broker with its daemon ready).
KILLABLE_WITHIN_S = 60.0
GRACE_S = 15  # twoPhaseDeletionInUseGraceSeconds: far above a trim's send-to-write time, even here
FAILPOINT_WAIT_S = 60  # a failpoint not reached by then is reported uncovered (this time), not waited for


def plan(kills: int, points: list[str] | None = None) -> list[str]:
    """Failpoint, failpoint, random, …: every failpoint (of ``points``, default all) comes up in turn."""
    points, out = list(points or POINTS), []
    for k in range(kills):
        out.append("random" if k % 3 == 2 else points[(k - k // 3) % len(points)])
    return out


@dataclass
class Record:
    """What happened, for the last line and the test's assertions."""

    kills: Counter = field(default_factory=Counter)  # fault -> SIGKILLs that landed
    missed: Counter = field(default_factory=Counter)  # failpoint -> times it was not reached in time
    recovery: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    violations: list[str] = field(default_factory=list)  # invariant 1, seen live by the observer
    sent: Counter = field(default_factory=Counter)  # requests the soak itself sent: orphan, probe, garbage
    notes: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, text: str) -> None:
        with self.lock:
            self.notes.append(text)

    def saw(self, found: list) -> None:
        with self.lock:
            for v in map(str, found):
                if v not in self.violations:
                    self.violations.append(v)


class Soak:
    """One run: the servers, the cluster, the processes, and the fault loop."""

    def __init__(self, root: Path, seed: int, log: Callable[[str], None], replicas: int = 1) -> None:
        self.root, self.seed, self.log = root, seed, log
        self.rng = random.Random(seed)
        self.record = Record()
        self.stop_event = threading.Event()
        self.servers = Servers(root).start()
        self.state = ClusterState(self.servers, topics=4, rng=random.Random(seed + 1))
        self.state.build()
        (root / "logs").mkdir(exist_ok=True)
        cfg = root / "soak.toml"
        cfg.write_text(
            f'ledgerDeletionTopic = "{REQUEST_TOPIC}"\ntwoPhaseDeletionLedgerDeletionParallelism = 2\n'
            f"twoPhaseDeletionReconsumeLaterInSeconds = 2\ntwoPhaseDeletionInUseGraceSeconds = {GRACE_S}\n"
            "twoPhaseDeletionMaxRetryDeleteCount = 50\nminLedgerAgeSeconds = 0\n"
            f'offloadAllowedBuckets = ["{self.state.bucket.name}"]\n')
        cli = Cli(root / "data", self.servers.metadata_url, self.servers.bookkeeper_url, cfg, root / "logs")
        self.fleet = Fleet.start(root, cli, replicas)
        self.cli, self.daemons = self.fleet.cli, self.fleet.daemons
        self.trims = TrimDriver(self.cli, self.state.topics, random.Random(seed + 2).choice)
        self.requested_orphans: set[int] = set()
        self.threads = [threading.Thread(target=self._broker_loop, name="soak-broker", daemon=True),
                        threading.Thread(target=self._observe_loop, name="soak-observer", daemon=True)]

    # ---- background load

    def _broker_loop(self) -> None:
        """The cluster's broker: grow a topic every ~0.4 s; every ~15 steps an orphan and a probe."""
        rng = random.Random(self.seed + 3)
        step = 0
        while not self.stop_event.wait(0.4):
            step += 1
            try:
                self.state.grow(rng.choice(self.state.topics))
                if step % 15 == 0:
                    self._orphan_and_probe(rng)
            except Exception as e:  # noqa: BLE001 - a hiccup of the test's own writes is reported, not fatal
                self.record.note(f"broker step failed: {type(e).__name__}: {e}")

    def _orphan_and_probe(self, rng: random.Random) -> None:
        """An unlisted ledger with an orphan request (must be deleted), and a ``manual`` request for a
        ledger still listed (must not be deleted while listed), through the real ``enqueue``."""
        topic = rng.choice(self.state.topics)
        orphan = self.state.orphan(topic)
        self.requested_orphans.add(orphan)  # intent first: a lost receipt may still have delivered it
        ml, _ = self.state.listed(topic)
        live = rng.choice(ml.ledger_ids())
        lines = [{"topicName": topic, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER",
                  "ledgerId": orphan, "reason": "orphan"},
                 {"topicName": topic, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER",
                  "ledgerId": live, "reason": "manual"}]
        if self._enqueue(lines, "orphan+probe"):
            with self.state.truth.lock:
                self.state.truth.orphans.add(orphan)

    def _enqueue(self, lines: list[dict], what: str, attempts: int = 5) -> bool:
        path = self.root / "logs" / f"enqueue-{threading.get_ident()}.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        for attempt in range(attempts):
            if attempt:  # most often the broker was between lives (a kill): again once it serves
                poll(self._broker_serves, 10, interval=0.1)
            code, _ = self.cli.run("enqueue", "--from-file", str(path), log_name="enqueue", timeout=60)
            if code == 0:
                self.record.sent[what] += len(lines)
                return True
        self.record.note(f"enqueue ({what}) failed {attempts} times")
        return False

    def _broker_serves(self) -> bool:
        """The broker the daemons consume from answers on its port (its record may be mid-rewrite)."""
        try:
            url = self.fleet.service_url()
        except (OSError, ValueError, KeyError):
            return False
        return port_answers(int(url.rsplit(":", 1)[1]))

    def _observe_loop(self) -> None:
        while not self.stop_event.wait(2):
            try:
                self.record.saw(self.state.observe())
            except Exception as e:  # noqa: BLE001 - a snapshot during a ZooKeeper hiccup: try again
                self.record.note(f"observation failed: {type(e).__name__}: {e}")

    def _publish_garbage(self) -> None:
        """An undecodable request (``enqueue`` refuses to send one): the daemon must dead-letter it."""
        client = pulsar.Client(self.fleet.service_url(), operation_timeout_seconds=5)
        try:
            producer = client.create_producer(f"{REQUEST_TOPIC}-partition-0", batching_enabled=False,
                                              send_timeout_millis=5000)
            producer.send(f"soak garbage {time.time()}".encode())
            self.record.sent["garbage"] += 1
        finally:
            client.close()

    def _provoke(self, name: str, last: float) -> float:
        """Make the work a rarely reached failpoint needs: a ``trim``-reason request for a ledger
        still listed (reconsumed inside the grace: a RETRY publish), or garbage (a DLQ publish)."""
        if time.monotonic() - last < 5:
            return last
        try:
            if name == "retry.after-publish":
                topic = self.rng.choice(self.state.topics)
                live = self.state.listed(topic)[0].ledger_ids()[-1]
                self._enqueue([{"topicName": topic, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER",
                                "ledgerId": live, "reason": "trim"}], "probe", attempts=1)
            elif name == "dlq.after-publish":
                self._publish_garbage()
        except Exception as e:  # noqa: BLE001 - the broker may be between lives: try again in 5 s
            self.record.note(f"provoking {name}: {type(e).__name__}: {e}")
        return time.monotonic()

    # ---- faults

    def _pick_daemon(self) -> Daemon:
        """The daemon a fault hits: the only one, or a replica chosen by the seed."""
        return self.daemons[0] if len(self.daemons) == 1 else self.rng.choice(self.daemons)

    def _daemon_failpoint(self, name: str, next_fault: str | None) -> None:
        once = name in ("broker.starting", "retry.after-publish", "dlq.after-publish")
        spec = f"{name}=kill@{1 if once else self.rng.randint(1, 3)}"
        daemon = next((d for d in self.daemons if (d.armed or "").startswith(f"{name}=")), None)
        if daemon is None:  # none armed with it already (by the restart after the previous fault)
            daemon = self._pick_daemon()
            daemon.stop()
            daemon.start(spec)
        deadline, last = time.monotonic() + FAILPOINT_WAIT_S, 0.0
        while daemon.running() and time.monotonic() < deadline:
            if name in ("retry.after-publish", "dlq.after-publish"):
                last = self._provoke(name, last)
            time.sleep(0.1)
        code = daemon.returncode()
        if code == KILLED:
            self.record.kills[name] += 1
        else:
            self.record.missed[name] += 1
            self.record.note(f"{name}: not reached in {FAILPOINT_WAIT_S}s ({daemon.name} exit {code})")
        self._restart_daemon(daemon, name if code == KILLED else None, next_fault)

    def _restart_daemon(self, daemon: Daemon, fault: str | None, next_fault: str | None) -> None:
        """Restart ``daemon`` (armed already when the next fault is one of its failpoints, so no
        stop-and-start is spent on arming it); its recovery is the time until /readyz answers 200."""
        daemon.kill()  # a daemon whose failpoint was not reached
        daemon.reap()
        t0 = time.monotonic()
        arm = None
        if next_fault is not None and TARGET.get(next_fault) == "daemon" and next_fault != "broker.starting":
            arm = f"{next_fault}=kill@1"
        daemon.start(arm)
        ready = daemon.wait_ready()
        if ready is None and not daemon.running() and arm is not None:
            self.record.note(f"{daemon.name} armed with {arm} died before ready; restarting clean")
            return self._restart_daemon(daemon, fault, None)
        if ready is None:
            self.record.note(f"{daemon.name} not ready after {fault}: exit {daemon.returncode()}")
            daemon.kill()
            return self._restart_daemon(daemon, fault, None)
        if fault is not None:
            self.record.recovery[fault].append(time.monotonic() - t0)

    def _trim_failpoint(self, name: str) -> None:
        index = self.trims.count()
        self.trims.arm(f"{name}=kill@1")
        deadline = time.monotonic() + FAILPOINT_WAIT_S
        killed = None
        while killed is None and time.monotonic() < deadline:
            killed = next((o for o in self.trims.since(index) if o.code == KILLED), None)
            time.sleep(0.1)
        self.trims.arm(None)
        if killed is None:
            self.record.missed[name] += 1
            self.record.note(f"{name}: not reached in {FAILPOINT_WAIT_S}s")
            return
        self.record.kills[name] += 1
        self._trim_recovery(name, killed)

    def _trim_recovery(self, fault: str, killed: TrimOutcome) -> None:
        """Until a trim of the killed trim's topic (re-run at once by the driver) exits 0."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            after = [o for o in self.trims.since(0) if o.started >= killed.ended and o.topic == killed.topic]
            done = next((o for o in after if o.code == 0), None)
            if done is not None:
                self.record.recovery[fault].append(done.ended - killed.ended)
                return
            time.sleep(0.1)
        self.record.note(f"{fault}: no successful trim of {killed.topic} within 120 s")

    def _reset_failpoint(self, name: str) -> None:
        """``cursor reset`` to a listed position, killed before its write, then run again.

        The target is picked and the armed reset runs while no trim does (``TrimDriver.held``):
        only trim removes a ledger from a list, so the target is still listed when the reset
        checks it and the reset reaches its failpoint.  The run after the kill races the trims
        again; a refusal then (exit 1: its target was trimmed meanwhile) is correct."""
        topic, sub = self.rng.choice(self.state.topics), self.rng.choice(("sub-a", "sub-b"))
        with self.trims.held():
            ids = self.state.listed(topic)[0].ledger_ids()
            position = f"{self.rng.choice(ids[len(ids) // 2:])}:{self.rng.randrange(10)}"
            args = ("cursor", "reset", "--topic", topic, "--subscription", sub, "--position", position)
            code, _ = self.cli.run(*args, failpoint=f"{name}=kill@1", log_name="reset")
        if code != KILLED:
            self.record.missed[name] += 1
            self.record.note(f"{name}: reset exited {code}")
            return
        self.record.kills[name] += 1
        t0 = time.monotonic()
        code, _ = self.cli.run(*args, log_name="reset")
        if code not in (0, 1):  # 1: the target ledger was trimmed meanwhile, refused (correct)
            self.record.note(f"reset after its kill exited {code}")
        self.record.recovery[name].append(time.monotonic() - t0)

    def _random_kill(self) -> None:
        """SIGKILL the daemon, a running trim or the embedded broker at a random moment under load."""
        target = self.rng.choice(("daemon", "trim", "broker"))
        time.sleep(self.rng.uniform(0.2, 3.0))
        fault = f"random:{target}"
        if target == "daemon":
            daemon = self._pick_daemon()
            daemon.kill()
            self.record.kills[fault] += 1
            self._restart_daemon(daemon, fault, None)
        elif target == "trim":
            killed = self._kill_a_trim()
            if killed is not None:
                self.record.kills[fault] += 1
                self._trim_recovery(fault, killed)
            else:
                self.record.note(f"{fault}: no trim was killed within {KILLABLE_WITHIN_S:.0f} s")
        elif self.fleet.replicated:
            self._kill_external_broker(fault)
        else:
            self._kill_broker(fault)

    def _kill_a_trim(self) -> TrimOutcome | None:
        """SIGKILL the running trim, and the next one if the signal found it exiting on its own (a slow
        machine starts fewer trims a second, and each may finish as it is signalled); its outcome."""
        deadline = time.monotonic() + KILLABLE_WITHIN_S
        while time.monotonic() < deadline:
            index = self.trims.count()
            if not self.trims.kill_current():
                time.sleep(0.05)
                continue
            poll(lambda i=index: bool(self.trims.since(i)), 120)  # the signalled trim reaped
            killed = next((o for o in self.trims.since(index) if o.code == KILLED), None)
            if killed is not None:
                return killed
        return None

    def _kill_external_broker(self, fault: str) -> None:
        """The replicas' one broker, SIGKILLed and restarted on its ports by the soak (as Kubernetes
        restarts a broker pod): recovery is until it runs and every replica's /readyz says 200."""
        broker = self.fleet.broker
        if broker is None or broker.proc is None or not all(d.ready() for d in self.daemons):
            return
        t0 = time.monotonic()
        os.kill(broker.proc.pid, signal.SIGKILL)
        broker.proc.wait(10)
        self.record.kills[fault] += 1
        broker.start()
        deadline = t0 + 90
        while time.monotonic() < deadline:
            if all(d.ready() for d in self.daemons):
                self.record.recovery[fault].append(time.monotonic() - t0)
                return
            for daemon in self.daemons:
                if not daemon.running():
                    self.record.note(f"{fault}: {daemon.name} exited {daemon.returncode()} when its broker died")
                    self._restart_daemon(daemon, None, None)
            time.sleep(0.1)
        self.record.note(f"{fault}: not recovered within 90 s")

    def _kill_broker(self, fault: str) -> None:
        """The daemon's supervisor restarts its broker: recovery is until a new broker runs and
        the daemon's /readyz says 200 again (no daemon restart)."""
        daemon = self.daemons[0]
        # the broker may be restarting, or the daemon not ready yet (a loaded machine): wait for both
        ready_by = time.monotonic() + KILLABLE_WITHIN_S
        while not ((old := broker_pids(self.cli.data_dir)) and daemon.ready()):
            if time.monotonic() > ready_by:
                self.record.note(f"{fault}: no broker with a ready daemon to kill within {KILLABLE_WITHIN_S:.0f} s")
                return
            time.sleep(0.1)
        t0 = time.monotonic()
        for pid in old:
            os.kill(pid, signal.SIGKILL)
        self.record.kills[fault] += 1
        deadline = t0 + 90
        while time.monotonic() < deadline:
            now = broker_pids(self.cli.data_dir)
            if now and not set(now) & set(old) and daemon.ready():
                self.record.recovery[fault].append(time.monotonic() - t0)
                return
            if not daemon.running():
                self.record.note(f"{fault}: the daemon exited {daemon.returncode()} instead of restarting "
                                 "its broker")
                return self._restart_daemon(daemon, fault, None)
            time.sleep(0.1)
        self.record.note(f"{fault}: not recovered within 90 s")

    # ---- the run

    def inject(self, fault: str, next_fault: str | None) -> None:
        if fault == "random":
            self._random_kill()
        elif TARGET[fault] == "daemon":
            self._daemon_failpoint(fault, next_fault)
        elif TARGET[fault] == "trim":
            self._trim_failpoint(fault)
        else:
            self._reset_failpoint(fault)
        for daemon in self.daemons:  # whatever happened, every daemon runs between faults
            if not daemon.running():
                self._restart_daemon(daemon, None, None)

    def run(self, kills: int, budget_s: float | None = None) -> None:
        """Inject ``kills`` faults; with ``budget_s``, no new fault starts after that many seconds."""
        for daemon in self.daemons:
            daemon.start()
        for daemon in self.daemons:
            if daemon.wait_ready() is None:
                raise RuntimeError(f"{daemon.name} did not start; see {self.cli.logs / f'{daemon.name}.log'}")
        for t in [*self.threads, self.trims]:
            t.start()
        faults = plan(kills, self.points())
        t0 = time.monotonic()
        for k, fault in enumerate(faults):
            if budget_s is not None and time.monotonic() - t0 > budget_s:
                self.log(f"[soak] time budget of {budget_s:.0f}s spent after {k} faults")
                break
            self.inject(fault, faults[k + 1] if k + 1 < len(faults) else None)
            if (k + 1) % 10 == 0 or k + 1 == len(faults):
                self.log(f"[soak] {k + 1}/{kills} faults, {sum(self.record.kills.values())} kills, "
                         f"{len(self.record.violations)} violations seen")

    def points(self) -> list[str]:
        """The failpoints this soak can reach: replicas run on an external broker, which no daemon starts."""
        return [p for p in POINTS if not (self.fleet.replicated and p in EMBEDDED_ONLY)]

    def drain(self) -> dict:
        """Stop the load, stop the daemons (timed), then ``run --exit-when-idle`` (in every daemon's
        data dir at once) until nothing is left."""
        self.stop_event.set()
        self.trims.stop_event.set()
        for t in [*self.threads, self.trims]:
            t.join(180)
        for daemon in self.daemons:
            daemon.stop()
        return self.fleet.drain(300)

    def verdict(self, drain: dict, started: float) -> dict:
        """The last line's figures: judged from the stores, after everything stopped."""
        wrong, leaks, figures = self.state.final_verdict()
        self.state.close()
        brokers_left = self.fleet.embedded_broker_pids()
        twice = deleted_twice(self.fleet.data_dirs())
        self.fleet.stop_broker()
        self.servers.stop()
        leaked = leaked_processes(self.root, exclude=set())
        for pid in self.servers.pids():  # counted above if still running; ours to stop in any case
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        wrongly = sorted({*self.record.violations, *map(str, wrong)})
        trims = self.trims.since(0)
        return {
            "kills": sum(self.record.kills.values()),
            "failpoints": sorted(k for k in self.record.kills if k in POINTS),
            "requests": self._requests(trims),
            "deleted": figures["deleted"],
            "wronglyDeleted": len(wrongly),
            "orphansLeft": len(leaks),
            "deletedTwice": len(twice),
            "leakedProcesses": len(leaked) + len(brokers_left),
            "replicas": len(self.daemons),
            "seed": self.seed,
            "seconds": round(time.monotonic() - started, 1),
            "killsByFault": dict(sorted(self.record.kills.items())),
            "missedFailpoints": dict(self.record.missed),
            "recoverySeconds": {f: _summary(v) for f, v in sorted(self.record.recovery.items())},
            "daemonShutdownSeconds": _summary([s for d in self.daemons for s in d.shutdown_s]),
            "daemonExits": dict(sum((d.exits for d in self.daemons), Counter())),
            "unreachableFailpoints": sorted(set(POINTS) - set(self.points())),
            "trims": dict(self.trims.codes),
            "drain": drain,
            "figures": {**figures, "sentBySoak": dict(self.record.sent), "casLostByBroker": self.state.grow_conflicts},
            "violations": wrongly[:20] + [str(v) for v in leaks[:20]] + twice[:20] + leaked[:10],
            "notes": self.record.notes[:30],
        }

    def _requests(self, trims: list) -> int:
        """Requests known to be on the topic: those of every trim that reported (one per ledger, plus one
        per offloaded copy), and those the soak enqueued or published.  A killed trim reports nothing,
        so its sends are not counted: this is a lower bound."""
        with self.state.truth.lock:
            offloaded = set(self.state.truth.objects)
        total = sum(len(o.result["picked"]) - len(o.result.get("kept", [])) +
                    len(set(o.result["picked"]) & offloaded) for o in trims if o.result)
        return total + sum(self.record.sent.values())


def _summary(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    return {"n": len(values), "median": round(statistics.median(values), 2), "max": round(max(values), 2)}


def run_soak(kills: int, seed: int, log: Callable[[str], None] = print, root: Path | None = None,
             budget_s: float | None = None, replicas: int = 1) -> dict:
    """A whole soak in a temp dir (kept when ``root`` is given, for its logs); returns the last line's dict.
    ``replicas`` > 1: that many daemons on one external pulsar-lite (``tests.support.soak.fleet``)."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ld-soak-") as tmp:
        base = root or Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        soak = Soak(base, seed, log, replicas)
        try:
            soak.run(kills, budget_s)
            drain = soak.drain()
        except BaseException:
            soak.stop_event.set()
            soak.trims.stop_event.set()
            soak.trims.kill_current()
            soak.fleet.kill_all()
            for pid in soak.fleet.embedded_broker_pids():
                os.kill(pid, signal.SIGKILL)
            soak.fleet.stop_broker()
            soak.state.close()
            soak.servers.stop()
            raise
        return soak.verdict(drain, started)
