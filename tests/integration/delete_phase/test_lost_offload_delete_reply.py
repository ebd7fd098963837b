"""An offload delete whose reply was lost is recorded as deleted (the tiered-storage side of a lost reply).

The executor retries a failed ``delete_all`` in-process.  When S3 applied a DELETE but its answer
never arrived, the retry HEADs the object, finds it gone and reports it "absent"; with both the data
and the index object lost that way, the request must still be audited "deleted" and counted.  The
REAL ``moto_server`` behind a loopback proxy (``ForwardThenFail``, built on ``tests/support/fault_proxy.py``):
it forwards a DELETE to the server, which applies it, then throws the answer away and replies 500, as a
connection cut after the server acted would look to the client.
"""

from __future__ import annotations

import http.client
import uuid
from http.server import BaseHTTPRequestHandler

from deletion_service.protocol.fate import Outcome
from tests.support.deletion_world import S3Bucket, World, request
from tests.support.fault_proxy import FaultProxy
from tests.support.harness import MotoS3Server
from tests.support.tiered_storage_world import TOPIC, world

__all__ = ["world"]  # the fixture: a deletion service on the real ZooKeeper and broker


class ForwardThenFail(FaultProxy):
    """The first ``times`` requests with ``method`` reach the server, and their answers are lost."""

    def __init__(self, upstream: str, method: str, times: int) -> None:
        self.method, self.remaining, self.lost = method, times, 0
        super().__init__(upstream)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        base = super()._handler_class()
        proxy = self

        class Handler(base):  # type: ignore[misc, valid-type]
            def _handle(self) -> None:
                if self.command != proxy.method or proxy.remaining <= 0:
                    base._handle(self)  # type: ignore[attr-defined]
                    return
                proxy.remaining -= 1
                body = self._body()  # type: ignore[attr-defined]
                conn = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=30)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "host")}
                    conn.request(self.command, self.path, body=body or None, headers=headers)
                    conn.getresponse().read()  # applied by the server; its answer goes nowhere
                finally:
                    conn.close()
                proxy.lost += 1
                self._error(500, "InternalError")  # type: ignore[attr-defined]

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle  # noqa: N815

        return Handler


def test_an_offload_delete_whose_reply_was_lost_is_recorded_as_deleted(world: World,
                                                                       s3_server: MotoS3Server) -> None:
    bucket = S3Bucket(s3_server.endpoint, f"b-{uuid.uuid4().hex[:8]}")
    bucket.client.create_bucket(Bucket=bucket.name)
    objects = set(bucket.offload_ledger(TOPIC, 41, 77, 1))
    with ForwardThenFail(s3_server.endpoint, "DELETE", times=2) as proxy:
        world.start()
        world.service.send_pending_delete(request(TOPIC, 41, ledgerType="OFFLOAD_LEDGER",
                                                  offloadContext=S3Bucket(proxy.endpoint, bucket.name)
                                                  .offload_context(77, 1)))
        world.drain(lambda w: sum(w.outcomes().values()) >= 1, timeout_s=120)
    assert proxy.lost == 2, "both objects' deletes were applied with their answers lost"
    assert objects.isdisjoint(bucket.keys())
    [settled] = [s for s in world.settled if s.outcome != Outcome.RECONSUMED]
    assert settled.outcome == Outcome.DELETED, f"audited as {settled.outcome.value}: {settled.action.reason}"
    assert "gone on re-read" in settled.action.reason
    assert settled.action.evidence is not None
    assert {o.key for o in settled.action.evidence.offload_objects} == objects
    assert world.service.metrics.value("pulsar_ledger_deletion_deleted_total", {"type": "OFFLOAD_LEDGER"}) == 1
