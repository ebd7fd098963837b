"""Phase one on a real ZooKeeper and the embedded broker: picks, one write, refusals, races.

What runs: trim and enqueue's ``send_all`` against a ZooKeeper chroot of their own, their requests
published to the session's embedded broker (pulsar-lite) through ``RequestPublisher``, each test on
request topics of its own; what the broker stored is read back where a test says what was sent.
In-process, and named where used: a broker failure of chosen requests (``BrokerSender.fail_for``:
the real broker cannot fail one request of a batch alone), two senders broken on purpose (one that
raises, one that answers the wrong number of times), and store wrappers that count writes or drop
reads (``CountingStore``, ``FlakyReads``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence

import pytest

from deletion_service.broker.interface import BrokerClient, BrokerError, parse_message_id
from deletion_service.broker.publisher import RequestPublisher
from deletion_service.broker.pulsar_client import PulsarBrokerClient
from deletion_service.cluster_writer import ClusterWriter
from deletion_service.cursor.reset import reset_stored_cursor
from deletion_service.mark_phase import enqueue
from deletion_service.mark_phase.pick import OffloadLocation
from deletion_service.mark_phase.trim import TrimRefused, one_at_a_time, trim
from deletion_service.protocol.request import PendingDeleteLedgerInfo, decode
from deletion_service.protocol.topics import DeletionTopics
from metastore import ABSENT, MetadataStore, MetadataStoreUnavailable, open_store
from metastore.formats import (
    CompressionType,
    LedgerInfo,
    ManagedLedgerInfo,
    OffloadContext,
    OffloadSegment,
    Position,
    decode_cursor,
    decode_managed_ledger,
    encode_managed_ledger,
    managed_ledger_path,
)
from tests.support.counting_stores import CountingStore, FlakyReads
from tests.support.harness import PulsarLiteBroker

TOPIC = "persistent://t/ns/orders"


@pytest.fixture
def store(zk_url: str) -> Iterator[CountingStore]:
    with open_store(zk_url) as s:
        yield CountingStore(s)


@pytest.fixture(scope="module")
def broker_client(pulsar_broker: PulsarLiteBroker) -> Iterator[BrokerClient]:
    client = PulsarBrokerClient(pulsar_broker.service_url)
    yield client
    client.close()


@pytest.fixture
def publisher(broker_client: BrokerClient) -> Iterator[RequestPublisher]:
    """The mark phase's publisher, on request topics of this test's own (one partition: one order)."""
    publisher = RequestPublisher(broker_client, DeletionTopics(
        f"persistent://pulsar/system/__mark-{uuid.uuid4().hex[:10]}", partitions=1))
    yield publisher
    publisher.close()


class BrokerSender:
    """trim's batch sender: ``RequestPublisher.send_requests`` on the embedded broker, recording what
    it receipted (``sent``, ``receipts``, in order) and each call's size (``batches``).

    ``fail_for`` injects a broker *failure* in-process, before the broker sees the request (a ledger
    id fails every request of that ledger, a ``(ledger id, ledger type)`` just that copy's): the real
    broker cannot be made to fail one request of a batch alone."""

    def __init__(self, publisher: RequestPublisher, fail_for: set[int | tuple[int, str]] | None = None) -> None:
        self.publisher = publisher
        self.sent: list[PendingDeleteLedgerInfo] = []
        self.receipts: list[str] = []
        self.batches: list[int] = []
        self.fail_for = fail_for or set()

    def _fails(self, request: PendingDeleteLedgerInfo) -> bool:
        return bool({request.ledger_id, (request.ledger_id, request.ledger_type.value)} & self.fail_for)

    def __call__(self, requests: Sequence[PendingDeleteLedgerInfo]) -> list[str | BrokerError]:
        self.batches.append(len(requests))
        going = [r for r in requests if not self._fails(r)]
        receipts = iter(self.publisher.send_requests(going))
        answers: list[str | BrokerError] = []
        for request in requests:
            answer = BrokerError("send timed out") if self._fails(request) else next(receipts)
            if isinstance(answer, str):
                self.sent.append(request)
                self.receipts.append(answer)
            answers.append(answer)
        return answers

    def delivered(self) -> list[PendingDeleteLedgerInfo]:
        """Every request the broker stored on this test's request topic, oldest first."""
        [topic] = self.publisher.topics.partition_topics
        return [decode(m.data) for m in self.publisher.broker.read_all(topic)]

    def stored(self) -> list[tuple[tuple[int, int], PendingDeleteLedgerInfo]]:
        """Every message the broker stored on this test's request topic: (its id as ledger and entry,
        the request it holds), as read back."""
        [topic] = self.publisher.topics.partition_topics
        return [(parse_message_id(m.message_id)[:2], decode(m.data)) for m in self.publisher.broker.read_all(topic)]

    def receipted(self) -> dict[tuple[int, int], PendingDeleteLedgerInfo]:
        """Each receipted request under the message id (ledger and entry) its receipt named."""
        pairs = zip(self.receipts, self.sent, strict=True)
        return {parse_message_id(receipt)[:2]: request for receipt, request in pairs}


def listed(store: MetadataStore, topic: str = TOPIC) -> list[int]:
    return decode_managed_ledger(store.get(managed_ledger_path(topic)).data).ledger_ids()  # type: ignore[union-attr]


def test_a_thousand_ledgers_trim_in_one_write(store: CountingStore, publisher: RequestPublisher) -> None:
    """900 ledgers trimmed with one metadata write and one pipelined send; the broker stored each
    request once, exactly under the message id its receipt named, and nothing else.

    Not asserted: that the broker stored them in the order they were sent.  The publisher sends a
    partition's requests in order and never sends one twice (a failed send is reported, not
    retried), but the order a partition is stored in is the broker's: Pulsar keeps one producer's
    order, pulsar-lite documents no such thing (its 0.2.0 broker completes persistent sends through
    a write queue), and two requests of a window can be stored the other way round.
    Nothing here depends on it: the daemon consumes a request topic on a Shared subscription, in
    no order, and trim's promise is that every picked ledger's request was receipted before its
    write.  A resend by the client (on a reconnect) would show here as a message stored twice."""
    w = ClusterWriter(store.inner)
    w.managed_ledger(TOPIC, range(1, 1001))
    w.cursor(TOPIC, "slow", Position(901, 3))
    w.cursor(TOPIC, "fast", Position(1000, 2))
    writes_before = len(store.writes)
    send = BrokerSender(publisher)
    result = trim(store, TOPIC, send, offline=True)
    assert result.picked == list(range(1, 901)) == result.removed
    assert store.writes[writes_before:] == ["multi of 3"]  # two cursor checks and the ledger list
    assert result.metadata_writes == 1
    assert listed(store.inner) == list(range(901, 1001))
    assert [r.ledger_id for r in send.sent] == list(range(1, 901))
    assert send.batches == [900]  # every request of the topic in one pipelined call
    assert len(set(send.receipts)) == 900
    stored = send.stored()  # what the broker stored
    assert len(stored) == 900 and dict(stored) == send.receipted()
    assert sorted(r.ledger_id for _, r in stored) == list(range(1, 901))  # no request twice, none missing
    assert {(r.ledger_type.value, r.reason.value, r.ledger_component.value) for r in send.sent} == {
        ("LEDGER", "trim", "MANAGED_LEDGER")
    }


def test_wholly_consumed_last_entry_counts_but_the_current_ledger_never_goes(
        store: CountingStore, publisher: RequestPublisher) -> None:
    w = ClusterWriter(store.inner)
    w.managed_ledger(TOPIC, [LedgerInfo(1, entries=5), LedgerInfo(2, entries=5), LedgerInfo(3, entries=5)])
    w.cursor(TOPIC, "sub", Position(3, 4))  # everything consumed, even the current ledger
    assert trim(store, TOPIC, BrokerSender(publisher), offline=True).removed == [1, 2]
    assert listed(store.inner) == [3]


def test_offloaded_ledgers_yield_both_requests_unless_bookkeeper_copy_is_gone(
        store: CountingStore, publisher: RequestPublisher) -> None:
    ctx = {"uid_msb": 5, "uid_lsb": 6, "complete": True, "driver_name": "aws-s3", "driver_metadata": {"bucket": "b"}}
    w = ClusterWriter(store.inner)
    w.managed_ledger(
        TOPIC,
        [
            LedgerInfo(1, 1, 1, offload_context=OffloadContext(**ctx, bookkeeper_deleted=False)),
            LedgerInfo(2, 1, 1, offload_context=OffloadContext(**ctx, bookkeeper_deleted=True)),
            LedgerInfo(3),
        ],
    )
    w.cursor(TOPIC, "sub", Position(3, 0))
    send = BrokerSender(publisher)
    trim(store, TOPIC, send, offline=True)
    assert [(r.ledger_id, r.ledger_type.value) for r in send.sent] == [
        (1, "LEDGER"),
        (1, "OFFLOAD_LEDGER"),
        (2, "OFFLOAD_LEDGER"),
    ]
    off = send.sent[1].offload_context
    assert off is not None and (off.uid_msb, off.uid_lsb, off.driver_name, off.driver_metadata) == (
        5,
        6,
        "aws-s3",
        {"bucket": "b"},
    )
    assert send.delivered() == send.sent  # the offload context as the broker stored it


def test_failed_sends_keep_their_ledgers(store: CountingStore, publisher: RequestPublisher) -> None:
    w = ClusterWriter(store.inner)
    w.managed_ledger(TOPIC, range(1, 7))
    w.cursor(TOPIC, "sub", Position(6, 0))
    send = BrokerSender(publisher, fail_for={2, 4})
    result = trim(store, TOPIC, send, offline=True)
    assert result.not_sent == [2, 4] and result.removed == [1, 3, 5]
    assert listed(store.inner) == [2, 4, 6]
    assert [r.ledger_id for r in send.delivered()] == [1, 3, 5]


def test_a_ledger_stays_listed_unless_every_copy_was_receipted(
        store: CountingStore, publisher: RequestPublisher) -> None:
    """Ledger 1 has a BookKeeper and an offloaded copy; only the offloaded copy's request fails."""
    ctx = OffloadContext(uid_msb=5, uid_lsb=6, complete=True, bookkeeper_deleted=False, driver_name="aws-s3",
                         driver_metadata={"bucket": "b"})
    w = ClusterWriter(store.inner)
    w.managed_ledger(TOPIC, [LedgerInfo(1, 1, 1, offload_context=ctx), LedgerInfo(2, 1, 1), LedgerInfo(3)])
    w.cursor(TOPIC, "sub", Position(3, 0))
    send = BrokerSender(publisher, fail_for={(1, "OFFLOAD_LEDGER")})
    progress: list[tuple[int, int]] = []
    result = trim(store, TOPIC, send, offline=True, progress=lambda done, total: progress.append((done, total)))
    assert [(r.ledger_id, r.ledger_type.value) for r in send.sent] == [(1, "LEDGER"), (2, "LEDGER")]
    assert result.not_sent == [1] and result.removed == [2] and listed(store.inner) == [1, 3]
    assert progress == [(0, 2), (2, 2)]


def test_a_batch_that_fails_whole_keeps_every_ledger(store: CountingStore) -> None:
    w = ClusterWriter(store.inner)
    w.managed_ledger(TOPIC, range(1, 4))
    w.cursor(TOPIC, "sub", Position(3, 0))
    before = len(store.writes)

    def broker_down(requests: Sequence[PendingDeleteLedgerInfo]) -> list[str | BrokerError]:
        raise BrokerError("cannot create a producer")  # test double for a broker failure

    result = trim(store, TOPIC, broker_down, offline=True)
    assert result.not_sent == [1, 2] and result.removed == [] and result.metadata_writes == 0
    assert store.writes[before:] == [] and listed(store.inner) == [1, 2, 3]


def test_a_sender_answering_for_the_wrong_number_of_requests_writes_nothing(store: CountingStore) -> None:
    w = ClusterWriter(store.inner)
    w.managed_ledger(TOPIC, range(1, 4))
    w.cursor(TOPIC, "sub", Position(3, 0))
    before = len(store.writes)
    with pytest.raises(RuntimeError, match="answered 1 times for 2 requests"):
        trim(store, TOPIC, lambda requests: ["id"], offline=True)  # a sender broken on purpose
    assert store.writes[before:] == [] and listed(store.inner) == [1, 2, 3]


def test_nothing_receipted_nothing_written(store: CountingStore, publisher: RequestPublisher) -> None:
    w = ClusterWriter(store.inner)
    w.managed_ledger(TOPIC, range(1, 4))
    w.cursor(TOPIC, "sub", Position(3, 0))
    before = len(store.writes)
    result = trim(store, TOPIC, BrokerSender(publisher, fail_for={1, 2}), offline=True)
    assert result.metadata_writes == 0 and store.writes[before:] == []
    assert listed(store.inner) == [1, 2, 3]


def test_no_cursor_no_pick(store: CountingStore, publisher: RequestPublisher) -> None:
    ClusterWriter(store.inner).managed_ledger(TOPIC, range(1, 4))
    result = trim(store, TOPIC, BrokerSender(publisher), offline=True)
    assert result.picked == [] and "no cursors" in (result.note or "")


def test_a_cursor_reset_during_the_sends_aborts_the_write(store: CountingStore, publisher: RequestPublisher) -> None:
    """The race made deterministic: the reset lands between pick and commit."""
    w = ClusterWriter(store.inner)
    w.managed_ledger(TOPIC, [LedgerInfo(i, entries=5) for i in range(1, 6)])
    w.cursor(TOPIC, "sub", Position(5, 0))
    resets = []

    def send_and_reset(request: PendingDeleteLedgerInfo) -> str:
        if not resets:  # an operator rewinds the subscription into ledger 2 while trim sends
            resets.append(reset_stored_cursor(store.inner, TOPIC, "sub", Position(2, 0)))
        return publisher.send_request(request)

    result = trim(store, TOPIC, one_at_a_time(send_and_reset), offline=True)
    assert result.aborted is not None and "sub" in result.aborted
    assert result.removed == [] and listed(store.inner) == [1, 2, 3, 4, 5]
    md = decode_cursor(store.inner.get(f"{managed_ledger_path(TOPIC)}/sub").data).mark_delete  # type: ignore[union-attr]
    assert md == Position(2, -1)


def test_owned_namespace_is_refused_unless_offline(store: CountingStore, publisher: RequestPublisher) -> None:
    w = ClusterWriter(store.inner)
    w.managed_ledger(TOPIC, range(1, 4))
    w.cursor(TOPIC, "sub", Position(3, 0))
    store.inner.put("/namespace/t/ns/0x00000000_0xffffffff", b'{"nativeUrl":"pulsar://b:6650"}', ABSENT)
    with pytest.raises(TrimRefused, match="owned by a broker .*--offline"):
        trim(store, TOPIC, BrokerSender(publisher))
    assert listed(store.inner) == [1, 2, 3]
    assert trim(store, TOPIC, BrokerSender(publisher), offline=True).removed == [1, 2]


def test_cursor_state_in_bookkeeper_is_refused(store: CountingStore, publisher: RequestPublisher) -> None:
    w = ClusterWriter(store.inner)
    w.managed_ledger(TOPIC, range(1, 4))
    w.cursor(TOPIC, "in-ledger", Position(3, 0), cursors_ledger_id=77)
    with pytest.raises(TrimRefused, match="in-ledger .*cursor ledger"):
        trim(store, TOPIC, BrokerSender(publisher), offline=True)


def test_written_back_with_its_compression_and_properties(store: CountingStore, publisher: RequestPublisher) -> None:
    ml = ManagedLedgerInfo([LedgerInfo(i, 1, 1) for i in range(1, 5)], {"k": "v"}, compression=CompressionType.ZSTD)
    store.inner.put(managed_ledger_path(TOPIC), encode_managed_ledger(ml), ABSENT)
    ClusterWriter(store.inner).cursor(TOPIC, "sub", Position(4, 0))
    trim(store, TOPIC, BrokerSender(publisher), offline=True)
    after = decode_managed_ledger(store.inner.get(managed_ledger_path(TOPIC)).data)  # type: ignore[union-attr]
    assert after.compression == CompressionType.ZSTD and after.properties == {"k": "v"}
    assert after.ledger_ids() == [4]


# --- Every copy a ledger has gets a request, or the ledger stays listed ---

DRIVERLESS = {"uid_msb": 5, "uid_lsb": 6, "complete": True}


@pytest.mark.parametrize(
    "ctx,why",
    [
        # the finding: an older broker's offload (no driverMetadata), BookKeeper copy already deleted
        (OffloadContext(**DRIVERLESS, bookkeeper_deleted=True), "names no driver"),
        # its neighbours: the BookKeeper copy is still there (a LEDGER request alone would orphan the objects)
        (OffloadContext(**DRIVERLESS, bookkeeper_deleted=False), "names no driver"),
        (OffloadContext(**DRIVERLESS), "names no driver"),
        # streaming-offload segments, no driver
        (OffloadContext(complete=True, bookkeeper_deleted=True, segments=[OffloadSegment(7, 8)]), "names no driver"),
        # offloaded (BookKeeper copy gone, or marked complete) but nothing names the objects
        (OffloadContext(complete=True, bookkeeper_deleted=True), "names no offloaded objects"),
        (OffloadContext(complete=True, driver_name="aws-s3", driver_metadata={"bucket": "b"}),
         "names no offloaded objects"),
        (OffloadContext(uid_msb=0, uid_lsb=0, bookkeeper_deleted=True, driver_name="aws-s3",
                        driver_metadata={"bucket": "b"}), "names no offloaded objects"),
        # a segment without a uuid cannot be named either
        (OffloadContext(**DRIVERLESS, bookkeeper_deleted=True, driver_name="aws-s3", driver_metadata={"bucket": "b"},
                        segments=[OffloadSegment(7, 8), OffloadSegment()]), "segment(s) 1 have no uuid"),
    ],
)
def test_a_copy_no_request_can_name_keeps_its_ledger_listed(store: CountingStore, ctx: OffloadContext,
                                                            why: str, publisher: RequestPublisher) -> None:
    w = ClusterWriter(store.inner)
    w.managed_ledger(TOPIC, [LedgerInfo(1, 1, 1, offload_context=ctx), LedgerInfo(2, 1, 1), LedgerInfo(3)])
    w.cursor(TOPIC, "sub", Position(3, 0))
    send = BrokerSender(publisher)
    result = trim(store, TOPIC, send, offline=True)
    assert result.picked == [1, 2] and result.removed == [2]
    assert [k.ledger_id for k in result.kept] == [1] and why in result.kept[0].why, result.kept
    assert [(r.ledger_id, r.ledger_type.value) for r in send.sent] == [(2, "LEDGER")]  # nothing half-announced
    assert listed(store.inner) == [1, 3]
    assert result.to_json()["kept"] == [{"ledgerId": 1, "why": result.kept[0].why}]


def test_a_driverless_offload_uses_the_cluster_offload_settings(
        store: CountingStore, publisher: RequestPublisher) -> None:
    w = ClusterWriter(store.inner)
    w.managed_ledger(TOPIC, [
        LedgerInfo(1, 1, 1, offload_context=OffloadContext(**DRIVERLESS, bookkeeper_deleted=True)),
        LedgerInfo(2, 1, 1, offload_context=OffloadContext(complete=True, bookkeeper_deleted=False,
                                                           segments=[OffloadSegment(7, 8)])),
        LedgerInfo(3),
    ])
    w.cursor(TOPIC, "sub", Position(3, 0))
    send = BrokerSender(publisher)
    fallback = OffloadLocation.from_settings("aws-s3", "cold", "eu-west-1", "http://s3.local:9000")
    result = trim(store, TOPIC, send, offline=True, offload_fallback=fallback)
    assert result.removed == [1, 2] and result.kept == []
    assert [(r.ledger_id, r.ledger_type.value) for r in send.sent] == [
        (1, "OFFLOAD_LEDGER"), (2, "LEDGER"), (2, "OFFLOAD_LEDGER")]
    for request in (send.sent[0], send.sent[2]):
        off = request.offload_context
        assert off is not None and (off.driver_name, off.driver_metadata) == (
            "aws-s3", {"bucket": "cold", "region": "eu-west-1", "serviceEndpoint": "http://s3.local:9000"})
    assert send.sent[0].offload_context.uid_msb == 5  # type: ignore[union-attr]
    assert [(s.uid_msb, s.uid_lsb) for s in send.sent[2].offload_context.segments] == [(7, 8)]  # type: ignore[union-attr]
    assert listed(store.inner) == [3]
    assert send.delivered() == send.sent  # the fallback's location as the broker stored it


def test_a_fallback_that_cannot_locate_the_objects_keeps_the_ledger(
        store: CountingStore, publisher: RequestPublisher) -> None:
    w = ClusterWriter(store.inner)
    w.managed_ledger(TOPIC, [LedgerInfo(1, 1, 1, offload_context=OffloadContext(**DRIVERLESS, bookkeeper_deleted=True)),
                             LedgerInfo(2)])
    w.cursor(TOPIC, "sub", Position(2, 0))
    send = BrokerSender(publisher)
    result = trim(store, TOPIC, send, offline=True, offload_fallback=OffloadLocation.from_settings("S3"))
    assert result.removed == [] and "managedLedgerOffloadBucket" in result.kept[0].why
    assert send.sent == [] and result.metadata_writes == 0 and listed(store.inner) == [1, 2]


def test_the_dry_run_says_which_ledgers_would_stay(store: CountingStore, publisher: RequestPublisher) -> None:
    w = ClusterWriter(store.inner)
    w.managed_ledger(TOPIC, [LedgerInfo(1, 1, 1, offload_context=OffloadContext(**DRIVERLESS, bookkeeper_deleted=True)),
                             LedgerInfo(2, 1, 1), LedgerInfo(3)])
    w.cursor(TOPIC, "sub", Position(3, 0))
    result = trim(store, TOPIC, BrokerSender(publisher), offline=True, dry_run=True)
    assert result.picked == [1, 2] and [k.ledger_id for k in result.kept] == [1] and result.removed == []


# --- A cursor created while trim sends ---


def test_a_cursor_created_during_the_sends_aborts_the_write(store: CountingStore,
                                                            publisher: RequestPublisher) -> None:
    """The race made deterministic: a subscription appears at Earliest between trim's read and
    its write.  Its node is not among those the multi-op checks; the re-list catches it."""
    w = ClusterWriter(store.inner)
    w.managed_ledger(TOPIC, [LedgerInfo(i, entries=5) for i in range(1, 6)])
    w.cursor(TOPIC, "sub", Position(5, 0))
    created = []

    def send_and_subscribe(request: PendingDeleteLedgerInfo) -> str:
        if not created:
            w.cursor(TOPIC, "late", Position(1, -1))  # straight into ZooKeeper, not through the counting store
            created.append(request.ledger_id)
        return publisher.send_request(request)

    writes_before = len(store.writes)
    result = trim(store, TOPIC, one_at_a_time(send_and_subscribe), offline=True)
    assert created == [1]
    assert result.aborted is not None and "new: late" in result.aborted, result.aborted
    assert result.removed == [] and result.metadata_writes == 0 and store.writes[writes_before:] == []
    assert listed(store.inner) == [1, 2, 3, 4, 5]


def test_a_cursor_deleted_during_the_sends_aborts_the_write(store: CountingStore,
                                                            publisher: RequestPublisher) -> None:
    w = ClusterWriter(store.inner)
    w.managed_ledger(TOPIC, [LedgerInfo(i, entries=5) for i in range(1, 6)])
    w.cursor(TOPIC, "a", Position(5, 0))
    w.cursor(TOPIC, "b", Position(5, 0))
    gone = []

    def send_and_unsubscribe(request: PendingDeleteLedgerInfo) -> str:
        if not gone:
            path = f"{managed_ledger_path(TOPIC)}/b"
            store.inner.delete(path, store.inner.get(path).version)  # type: ignore[union-attr]
            gone.append(path)
        return publisher.send_request(request)

    result = trim(store, TOPIC, one_at_a_time(send_and_unsubscribe), offline=True)
    assert result.aborted is not None and "gone: b" in result.aborted
    assert result.removed == [] and listed(store.inner) == [1, 2, 3, 4, 5]


def test_every_read_rides_out_a_brief_outage_and_the_write_is_made_once(
        zk_url: str, publisher: RequestPublisher) -> None:
    """The store tries each read once; trim's own retry rides out what a reconnect drops."""
    with open_store(zk_url) as inner:
        w = ClusterWriter(inner)
        w.managed_ledger(TOPIC, range(1, 4))
        w.cursor(TOPIC, "sub", Position(3, 0))
        store = FlakyReads(inner)
        result = trim(store, TOPIC, BrokerSender(publisher))  # not offline: the ownership check reads too
        assert result.removed == [1, 2] and listed(inner) == [3]
        assert store.dropped == 5  # ownership, managed ledger, cursor list, cursor nodes, the re-list
        assert store.writes == ["multi of 2"]


def test_a_store_that_stays_down_fails_trim_with_its_error_and_writes_nothing(
        zk_url: str, publisher: RequestPublisher) -> None:
    with open_store(zk_url) as inner:
        w = ClusterWriter(inner)
        w.managed_ledger(TOPIC, range(1, 4))
        w.cursor(TOPIC, "sub", Position(3, 0))
        store = FlakyReads(inner, down=True)
        with pytest.raises(MetadataStoreUnavailable, match="injected fault"):
            trim(store, TOPIC, BrokerSender(publisher), offline=True)
        assert store.dropped == 3 and store.writes == []  # three tries of the first read, then its error
        assert listed(inner) == [1, 2, 3]


# --- enqueue's pipelined send_all ---


def test_send_all_reports_exactly_which_requests_were_receipted(publisher: RequestPublisher) -> None:
    requests = [enqueue.single_request(TOPIC, lid) for lid in range(1, 6)]
    calls: list[int] = []
    progress: list[int] = []
    ok = BrokerSender(publisher)
    assert enqueue.send_all(requests, ok, progress.append) == ok.receipts  # the broker's, in the input order
    assert ok.sent == requests and len(set(ok.receipts)) == 5
    assert ok.batches == [5] and progress == [5]

    def record(batch: Sequence[PendingDeleteLedgerInfo]) -> list[str | BrokerError]:
        calls.append(len(batch))
        return failing(batch)

    failing = BrokerSender(publisher, fail_for={2})  # a broker failure on ledger 2's request, injected
    with pytest.raises(enqueue.NotAllSent) as caught:
        enqueue.send_all(requests, record)
    first, *later = failing.receipts
    assert len(later) == 3 and caught.value.message_ids == [first, None, *later]  # pipelined: later ones went out
    assert caught.value.sent == 4 and caught.value.unsent() == [1] and "sent 4 of 5" in str(caught.value)
    assert calls == [5]


def test_send_all_stops_after_a_batch_with_a_failure(
        monkeypatch: pytest.MonkeyPatch, publisher: RequestPublisher) -> None:
    monkeypatch.setattr(enqueue, "SEND_BATCH", 2)
    requests = [enqueue.single_request(TOPIC, lid) for lid in range(1, 6)]
    send = BrokerSender(publisher, fail_for={1})
    with pytest.raises(enqueue.NotAllSent) as caught:
        enqueue.send_all(requests, send)
    assert send.batches == [2] and len(send.receipts) == 1
    assert caught.value.message_ids == [None, send.receipts[0], None, None, None]
