"""Fuzz the DLQ readers and message properties (forged markers, hostile messages), as test_consumer_fuzz does decode.

Two layers.  Hypothesis drives the pure readers with hostile bytes and properties: a parked message's
listing (:func:`deletion_service.dlq.operations.entry`, and the admin API's response model over it), the marker
check and the sorting of a DLQ into parked and settled (:func:`deletion_service.dlq.operations.sort_out`), and
the copies the daemon makes of what it receives (``dispose.dead_letter_copy``/``retry_copy``).  Each
must never raise, and nothing but a marker this tool signed may hide a message.  Then a few hundred
hostile messages go through the real broker: straight into the DLQ, and as requests through the real
daemon (``run``), and the real CLI must list every one of them (hidden parked 0) and purge them all.
"""

from __future__ import annotations

import json
import os
import random
import secrets
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deletion_service.admin.schemas import DlqEntryModel
from deletion_service.broker.interface import Received
from deletion_service.cluster_writer import ClusterWriter
from deletion_service.config import DeletionConfig
from deletion_service.delete_phase.consumer import copies as dispose
from deletion_service.dlq.marker import MarkerKey
from deletion_service.dlq.operations import entry, sort_out
from deletion_service.protocol.topics import DeletionTopics, namespace_topics
from metastore import open_store
from tests.support.dlq_deployment import CLUSTER, MARKER, Deployment, deployed
from tests.support.hostile_requests import hostile as hostile_requests
from tests.support.hostile_requests import json_values

#: Hypothesis examples per property: 300 in the suite (the same properties, fewer draws);
#: ``scripts/soak_long.sh`` runs 1500 (``DLQ_FUZZ_EXAMPLES``).
EXAMPLES = int(os.environ.get("DLQ_FUZZ_EXAMPLES") or 300)
TRIED: Counter = Counter()
NS = namespace_topics("t/ns", DeletionTopics.from_config(DeletionConfig()))
TOPICS = [*CLUSTER.partition_topics, CLUSTER.retry, CLUSTER.dlq, NS.base, NS.retry, NS.dlq, "persistent://x/y/z",
          "", "persistent://t/ns/__ledger_deletion-RETRY-partition-0"]
PROPERTY_NAMES = [*sorted(dispose.OURS), dispose.RECONSUMETIMES, dispose.DELAY_TIME, dispose.GRACE_SINCE, "k"]

bodies = st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.integers(min_value=1, max_value=100_000).map(lambda n: b'{"settled":' + b"[" * n),
    st.integers(min_value=1, max_value=20_000).map(lambda n: b'{"a":' * n + b"1" + b"}" * n),
    st.lists(st.text(max_size=12), max_size=5).map(
        lambda ids: json.dumps({"dlq": CLUSTER.dlq, "settled": ids, "mac": "0" * 64}).encode()),
    hostile_requests,
)
values = st.one_of(st.text(max_size=60), st.integers().map(str), st.sampled_from(
    ["9" * 5000, "-1", "1e9", "NaN", "\u2028", "(1,2,3,4)", CLUSTER.partition_topics[0], NS.base,
     "persistent://other/ns/__ledger_deletion", "x" * 4100]))
properties = st.dictionaries(st.sampled_from(PROPERTY_NAMES) | st.text(min_size=1, max_size=20), values, max_size=8)
message_ids = st.sampled_from(["(5,1,-1,-1)", "(5,2,3,-1)", "(5,3,-1,7)", "5:4", "", "garbage"]) | st.text(max_size=20)


@st.composite
def received(draw: st.DrawFn, topic: str | None = None) -> Received:
    return Received(draw(bodies), draw(properties), topic if topic is not None else draw(st.sampled_from(TOPICS)),
                    draw(message_ids), draw(st.integers(min_value=0, max_value=2**62)))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(received())
def test_a_listing_reads_any_message(message: Received) -> None:
    TRIED["listing"] += 1
    e = entry(message, CLUSTER.dlq)
    document = DlqEntryModel.model_validate(e.to_json())  # what the admin API answers, validated as it does
    json.dumps(document.model_dump()).encode()
    assert (e.request is None) == (e.payload_base64 is not None or len(message.data) > dispose.MAX_DLQ_BODY)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(received(CLUSTER.dlq), max_size=6), st.integers(min_value=0, max_value=3), st.data())
def test_only_a_signed_marker_hides_anything(hostile: list[Received], genuine_count: int, data: st.DataObject) -> None:
    TRIED["sorting"] += len(hostile) + 1
    key = MarkerKey(secrets.token_bytes(32))
    stored = [Received(m.data, m.properties, m.topic, f"(9{i},0,-1,-1)", m.publish_time_ms)
              for i, m in enumerate(hostile)]
    genuine = [Received(b"{}", {"reason": "delete-failed"}, CLUSTER.dlq, f"(7,{i},-1,-1)", 1)
               for i in range(genuine_count)]
    settled = [f"7:{i}" for i in range(genuine_count) if data.draw(st.booleans())]
    marker = [Received(body, {MARKER: "purge"}, CLUSTER.dlq, f"(8,{i},-1,-1)", 2)
              for i, body in enumerate(key.bodies(CLUSTER.dlq, settled))]
    flipped = []
    if marker and data.draw(st.booleans()):  # a genuine marker with one byte changed settles nothing it did not
        body = bytearray(marker[0].data)
        at = data.draw(st.integers(min_value=0, max_value=len(body) - 1))
        body[at] = data.draw(st.integers(min_value=0, max_value=255).filter(lambda b: b != body[at]))
        flipped = [Received(bytes(body), {MARKER: "purge"}, CLUSTER.dlq, "(6,0,-1,-1)", 3)]
        assert key.settled_by(CLUSTER.dlq, flipped[0]) in (None, settled)
    snap = sort_out(CLUSTER, [*genuine, *stored, *marker, *flipped], key)
    parked = {e.message_id for e, _ in snap.entries()}
    expected = {f"9{i}:0" for i in range(len(hostile))} | {f"7:{i}" for i in range(genuine_count)} - set(settled)
    if flipped and key.settled_by(CLUSTER.dlq, flipped[0]) is None:
        expected.add("6:0")
    assert parked == expected, "hidden parked: only a marker this tool signed may hide a message"
    assert set(snap.markers) == {f"8:{i}" for i in range(len(marker))}
    assert sort_out(NS, [Received(m.data, m.properties, NS.dlq, m.message_id, 2) for m in marker], key).markers == [], \
        "a marker copied into another DLQ settles nothing there"


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(received(), st.booleans(), st.floats(min_value=0, max_value=1e6))
def test_copies_carry_no_claim_about_us(message: Received, undecodable: bool, delay_s: float) -> None:
    TRIED["copies"] += 1
    dead = dispose.dead_letter_copy(message, "invalid-request", "why", undecodable=undecodable)
    retry = dispose.retry_copy(message, delay_s)
    for copy in (dead, retry):
        assert dispose.SETTLED_MARKER not in copy.properties
        assert dispose.family(copy.properties[dispose.REAL_TOPIC]) == dispose.family(message.topic)
        assert sum(len(k) + len(v) for k, v in copy.properties.items()) < 400_000  # fits any broker
    assert dead.properties[dispose.DLQ_REASON] == "invalid-request"
    assert (dispose.DLQ_PAYLOAD_TRUNCATED in dead.properties) == (len(message.data) > dispose.MAX_DLQ_BODY)
    assert len(dead.data) <= dispose.MAX_DLQ_BODY


FUZZ_DLQ = 200
FUZZ_REQUESTS = 120


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    """Cluster scope; no retry waits (a hostile request may be retried: it must not hold up the idle exit)."""
    config = ("minLedgerAgeSeconds = 0\ntwoPhaseDeletionReconsumeLaterInSeconds = 0\n"
              "twoPhaseDeletionMaxRetryDeleteCount = 1\ntwoPhaseDeletionInUseGraceSeconds = 0\n")
    for d in deployed(tmp_path, config):
        with open_store(f"sqlite:///{d.data_dir / 'metadata.db'}") as store:
            ClusterWriter(store).ensure_layout()
        yield d


@pytest.mark.filterwarnings("ignore::hypothesis.errors.NonInteractiveExampleWarning")
def test_hostile_messages_on_the_real_broker_are_all_listed_and_purged(deployment: Deployment) -> None:
    d = deployment
    rng = random.Random(20261124)
    straight = [(received().example().data, {k: v for k, v in properties.example().items()})
                for _ in range(FUZZ_DLQ)]
    straight += [(b'{"settled":["1:1"]}', {MARKER: "purge"}), (b'{"settled":' + b"[" * 100_000, {MARKER: "x"})]
    genuine = d.send(CLUSTER.dlq, [(b"{}", {"reason": "delete-failed"}) for _ in range(3)])
    parked = d.send(CLUSTER.dlq, straight)
    requests = [(hostile_requests.example(), properties.example()) for _ in range(FUZZ_REQUESTS)]
    d.send(CLUSTER.partition_topics[rng.randrange(CLUSTER.partitions)], requests)
    d.run_until_idle()  # the daemon settles every request: absent, or to the DLQ with a copy
    copies = [m for m in d.read(CLUSTER.dlq) if m.properties().get("reason") == "invalid-request"]
    assert not [m for m in copies if MARKER in m.properties()], "a DLQ copy carried a request's marker"
    r = d.cli("--json", "dlq", "purge", genuine[0], "--yes")  # a genuine marker: hides exactly that one
    assert r.returncode == 0, r.stderr
    listed = {e["messageId"] for e in d.listed()}
    expected = {*genuine[1:], *parked, *(f"{m.message_id().ledger_id()}:{m.message_id().entry_id()}" for m in copies)}
    hidden = expected - listed
    assert not hidden, f"hidden parked: {sorted(hidden)[:5]}"
    assert listed == expected
    r = d.cli("--json", "dlq", "purge", "--all", "--yes")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["purged"] == len(expected)
    assert d.listed() == []
    tried = sum(TRIED.values()) + len(straight) + len(requests)
    print(f"DLQ fuzz: {tried} inputs tried ({dict(TRIED)} in-process; {len(straight)} straight into the DLQ and "
          f"{len(requests)} requests through the daemon on the real broker), 0 crashes, 0 hidden parked, "
          f"{len(expected)} listed and purged")
