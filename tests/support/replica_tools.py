"""Tools for the tests of daemon replicas (tests/system/replicas, tests/system/tenancy).  Built on
``tests/support/replicas_world.py``: real ``run`` processes, one broker, one ZooKeeper."""

from __future__ import annotations

import http.client
import json
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

import boto3
import pulsar

from deletion_service.cluster_writer import pulsar_custom_metadata
from deletion_service.failpoints import ENV as FAILPOINTS_ENV
from metastore.formats.ledger_paths import ledger_path
from tests.support.deletion_world import S3Bucket
from tests.support.fault_proxy import FaultProxy
from tests.support.harness import MotoS3Server, free_port
from tests.support.replicas_world import Replica, ReplicaWorld


def start_with(replica: Replica, *run_options: str, failpoint: str | None = None) -> Replica:
    """``replica.start`` with ``run``'s own options (``--namespace``, ``--tenant``), which must follow ``run``."""
    replica.port = free_port()
    env = dict(replica.env)
    env.pop(FAILPOINTS_ENV, None)
    if failpoint:
        env[FAILPOINTS_ENV] = failpoint
    log = open(replica.data_dir.parent / f"{replica.name}.log", "ab")  # noqa: SIM115 - the child's for its life
    replica.proc = subprocess.Popen([*replica.argv, "run", "--admin-address", f"127.0.0.1:{replica.port}",
                                     *run_options], stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env)
    log.close()
    return replica


def orphan(world: ReplicaWorld, ledger_id: int, topic: str) -> int:
    """A closed Pulsar ledger of ``topic`` no managed ledger lists (``minLedgerAgeSeconds`` is 0 here)."""
    world.writer.bk_ledger(ledger_id, pulsar_custom_metadata(topic))
    world.ledgers.append(ledger_id)
    return ledger_id


def exists(world: ReplicaWorld, ledger_id: int) -> bool:
    return world.store.get(ledger_path(world.writer.root, ledger_id, world.writer.layout)) is not None


def request(topic: str, ledger_id: int, reason: str = "orphan", **extra: object) -> bytes:
    return json.dumps({"topicName": topic, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER",
                       "ledgerId": ledger_id, "reason": reason, "markedAt": int(time.time() * 1000),
                       **extra}).encode()


def send_raw(service_url: str, topic: str, payload: bytes, properties: dict[str, str] | None = None) -> None:
    """Produce one message as any client with produce rights on ``topic`` would (no tool of ours)."""
    client = pulsar.Client(service_url, operation_timeout_seconds=10)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(payload, properties=properties or {})
        producer.close()
    finally:
        client.close()


def metrics(replica: Replica) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{replica.port}/metrics", timeout=5) as r:
        return r.read().decode()


def gauge(text: str, name: str) -> float:
    """The sum of every sample of ``name`` (all label sets) in a /metrics text."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name):len(name) + 1] in (" ", "{")):
            total += float(line.rsplit(" ", 1)[1])
    return total


def enqueue_lines(world: ReplicaWorld, requests: list[tuple[str, int]]) -> None:
    """``enqueue --from-file`` (as ``scan-orphans --enqueue`` sends): each (topic, ledger) to wherever the
    product routes it."""
    lines = world.root / f"lines-{requests[0][1]}.jsonl"
    lines.write_text("".join(json.dumps({"topicName": t, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "LEDGER",
                                         "ledgerId": lid, "reason": "orphan"}) + "\n" for t, lid in requests))
    out = subprocess.run([*world.argv(world.root / "enqueue-data"), "enqueue", "--from-file", str(lines)],
                         env=world.env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def settled(world: ReplicaWorld, ledger_id: int) -> list[str]:
    """The outcomes every replica's audit trail records for ``ledger_id``."""
    return [r["outcome"] for rep in world.replicas for r in rep.audit() if r["request"].get("ledgerId") == ledger_id]


class SlowDeletes(FaultProxy):
    """``tests.support.fault_proxy.FaultProxy`` that forwards every request, but makes each delete (S3 ``DELETE``, and
    the ``POST ?delete`` of a batch) slow: held ``delay_s`` before it is forwarded, or with ``reply_late``
    forwarded at once (the store applies it) and answered ``delay_s`` later.  A slow endpoint, nothing
    dropped: a fault moto cannot produce on its own; the store behind it is the real moto_server."""

    def __init__(self, upstream: str, delay_s: float, reply_late: bool = False) -> None:
        self.delay_s, self.reply_late = delay_s, reply_late
        self.deletes_applied = threading.Event()  # reply_late: a delete reached the store
        super().__init__(upstream)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        base = super()._handler_class()
        proxy = self

        class Slow(base):  # type: ignore[misc, valid-type]
            def _forward(self, body: bytes) -> None:
                if self.command not in ("DELETE", "POST"):
                    base._forward(self, body)  # pyright: ignore[reportAttributeAccessIssue]
                elif not proxy.reply_late:
                    proxy._stopping.wait(proxy.delay_s)  # noqa: SLF001 - the proxy's own stop event
                    base._forward(self, body)  # pyright: ignore[reportAttributeAccessIssue]
                else:
                    self._apply_then_answer_late(body)

            def _apply_then_answer_late(self, body: bytes) -> None:
                conn = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=30)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "keep-alive")}
                    conn.request(self.command, self.path, body=body or None, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                finally:
                    conn.close()
                proxy.deletes_applied.set()
                proxy._stopping.wait(proxy.delay_s)  # noqa: SLF001 - the proxy's own stop event
                self.send_response(resp.status, resp.reason)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Slow


def enqueue_offload(world: ReplicaWorld, bucket: S3Bucket, endpoint: str, ledger: int, msb: int, lsb: int,
                    copies: int = 1) -> None:
    """``enqueue --from-file`` of ``copies`` identical requests for one offloaded copy of ``world.topic``'s,
    written at ``endpoint`` (the proxy in front of ``bucket``'s server)."""
    context = {**bucket.offload_context(msb, lsb), "driverMetadata": {
        "bucket": bucket.name, "region": "us-east-1", "serviceEndpoint": endpoint}}
    line = json.dumps({"topicName": world.topic, "ledgerComponent": "MANAGED_LEDGER", "ledgerType": "OFFLOAD_LEDGER",
                       "ledgerId": ledger, "offloadContext": context, "reason": "orphan"})
    lines = world.root / f"offload-{ledger}.jsonl"
    lines.write_text((line + "\n") * copies)
    out = subprocess.run([*world.argv(world.root / "enqueue-data"), "enqueue", "--from-file", str(lines)],
                         env=world.env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


@contextmanager
def bucket_behind_slow_deletes(s3_server: MotoS3Server, delay_s: float,
                               reply_late: bool = False) -> Iterator[tuple[SlowDeletes, S3Bucket]]:
    """A fresh bucket on the session's moto_server, and a :class:`SlowDeletes` proxy in front of it."""
    name = f"replicas-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=s3_server.endpoint, region_name="us-east-1").create_bucket(Bucket=name)
    proxy = SlowDeletes(s3_server.endpoint, delay_s=delay_s, reply_late=reply_late)
    proxy.start()
    try:
        yield proxy, S3Bucket(s3_server.endpoint, name)
    finally:
        proxy.stop()
