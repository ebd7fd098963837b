"""The broker interface on the official ``pulsar-client`` (a real cluster or pulsar-lite)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pulsar
from pulsar.exceptions import ConsumerBusy

from deletion_service.broker.authentication import BrokerCredentials
from deletion_service.broker.consumer_ids import ConsumerIds
from deletion_service.broker.interface import (
    BrokerClient,
    BrokerError,
    Consumer,
    Outgoing,
    Producer,
    Received,
    parse_message_id,
)
from deletion_service.broker.read_slots import GROUPS, ReadSlots, slot_name
from deletion_service.failpoints import failpoint

_log = logging.getLogger(__name__)

#: The producer's own send timeout: a message not receipted by then fails with ``Timeout``.
SEND_TIMEOUT_MS = 15_000
#: At most this many messages in flight per producer in ``send_many``.  Why a window at all: the
#: embedded broker (pulsar-lite) accepts thousands of outstanding messages but then dispatches them
#: to consumers at ~200 msg/s; windows of 100, each awaited before the next, measured fine, and a
#: real broker gains little from more (one round trip per 100 messages instead of per message).
SEND_WINDOW = 100
#: How long a window's receipts are awaited: a little above the send timeout, so the client's own
#: ``Timeout`` normally arrives first and we only stop waiting on a client that went silent.
WINDOW_WAIT_S = SEND_TIMEOUT_MS / 1000 + 5


def _client_logger() -> logging.Logger | pulsar.FileLogger:
    """pulsar-client logs every connection at INFO; route it through logging at WARNING.

    A Python logger gets *every* line of the C++ client, DEBUG included (it cannot tell the C++
    side its level), each one a jump into Python under the GIL: about five per message sent,
    which measured as half the CPU of a pipelined send.  So when our logging would drop even
    ERROR lines (the CLI and the daemon silence library chatter unless ``--debug``), the C++
    side gets a logger that discards them itself.  The level is read once, at client creation."""
    logger = logging.getLogger("pulsar-client")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.WARNING)
    if not logger.isEnabledFor(logging.ERROR):
        return pulsar.FileLogger(pulsar.LoggerLevel.Error, os.devnull)
    return logger


def _deliver_after(deliver_after_s: float) -> timedelta | None:
    """The client's ``deliver_after`` argument: ``None`` (its default) for an immediate message."""
    return timedelta(seconds=deliver_after_s) if deliver_after_s > 0 else None


class _Receipts:
    """The outcomes of one window of ``send_async`` calls, filled in by the client's thread."""

    def __init__(self, size: int) -> None:
        self.outcomes: list[tuple[pulsar.Result, Any] | None] = [None] * size
        self.all_in = threading.Event()
        self._left = size
        self._lock = threading.Lock()
        if size == 0:
            self.all_in.set()

    def on_receipt(self, index: int, result: pulsar.Result, msg_id: Any) -> None:
        """The ``send_async`` callback.  It runs on the client's I/O thread, where an exception would
        end the process and slowness would stall every other receipt: store and count, nothing else."""
        with self._lock:
            self.outcomes[index] = (result, msg_id)
            self._left -= 1
            if self._left == 0:
                self.all_in.set()

    def refused(self) -> None:
        """A message the client refused synchronously: no callback will come for it."""
        with self._lock:
            self._left -= 1
            if self._left == 0:
                self.all_in.set()

    def snapshot(self) -> list[tuple[pulsar.Result, Any] | None]:
        """The outcomes so far; a callback arriving later changes nothing the caller holds."""
        with self._lock:
            return list(self.outcomes)


@dataclass
class _Window:
    """One producer's window in flight."""

    receipts: _Receipts
    refusals: dict[int, BrokerError]


def _close_quietly(thing: Any, what: str) -> None:
    """Close a client-side producer, consumer, reader or client: an error from the broker on the way
    out changes nothing for us (unacked messages go back either way), so it is logged at debug only."""
    try:
        thing.close()
    except pulsar.PulsarException as e:
        _log.debug("closing %s: %s", what, e)


def _drop_quietly(consumer: Any, what: str) -> None:
    """Unsubscribe a read slot that did not read whole: someone acked in it (anyone may, on pulsar-lite),
    and what they acked would never come back to it, so every later read under it would wait out
    :data:`SLOT_FIRST_MS` and fall back to Readers.  Dropped, the next read under it subscribes afresh
    from the topic's first entry (measured on pulsar-lite: an unsubscribed name reads every entry
    again); a spoiler must then spoil it again, at its own cost, for each read it wants to slow."""
    try:
        consumer.unsubscribe()
    except pulsar.PulsarException as e:
        _log.debug("dropping %s: %s", what, e)


def _send_in_windows(batches: Sequence[tuple[_Producer, Sequence[Outgoing]]]) -> list[list[str | BrokerError]]:
    """Every batch's messages, in rounds: each round starts one window (at most :data:`SEND_WINDOW`
    messages) on every producer, then awaits them all.  One thread keeps every partition busy
    (threads per partition measured half as fast: their handoffs cost more than they overlap), and
    no producer ever has more than a window outstanding.

    Once a producer's window times out (the broker stopped answering), the rest of its batch is not
    attempted, each message reported as failed: waiting out one timeout per window would turn a
    dead broker into minutes of silence."""
    results: list[list[str | BrokerError]] = [[] for _ in batches]
    stalled = [False] * len(batches)
    longest = max((len(messages) for _, messages in batches), default=0)
    for start in range(0, longest, SEND_WINDOW):
        in_flight: list[tuple[int, _Window]] = []
        for k, (producer, messages) in enumerate(batches):
            window = messages[start:start + SEND_WINDOW]
            if stalled[k]:
                results[k] += producer.not_attempted(len(window))
            elif window:
                in_flight.append((k, producer.start_window(window)))
        if in_flight:
            failpoint("send.before-receipt")
        deadline = time.monotonic() + WINDOW_WAIT_S
        for k, window in in_flight:
            window_results, stalled[k] = batches[k][0].finish_window(window, deadline)
            results[k] += window_results
    return results


class _Producer(Producer):
    def __init__(self, producer: pulsar.Producer, topic: str) -> None:
        self._producer = producer
        self._topic = topic

    def send(self, data: bytes, properties: dict[str, str] | None = None, deliver_after_s: float = 0) -> str:
        try:
            return str(self._producer.send(data, properties=properties or {},
                                            deliver_after=_deliver_after(deliver_after_s)))
        except pulsar.PulsarException as e:
            raise BrokerError(f"send to {self._topic} failed: {e}") from e

    def send_many(self, messages: Sequence[Outgoing]) -> list[str | BrokerError]:
        """Pipelined: windows of :data:`SEND_WINDOW` messages in flight, each window's receipts awaited
        before the next is sent (see :func:`_send_in_windows`)."""
        return _send_in_windows([(self, messages)])[0]

    def start_window(self, window: Sequence[Outgoing]) -> _Window:
        """``send_async`` every message of ``window``; a message the client refuses synchronously
        (whatever it raised) is that message's failure, not the window's."""
        receipts = _Receipts(len(window))
        refusals: dict[int, BrokerError] = {}
        for i, message in enumerate(window):
            try:
                self._producer.send_async(message.data, partial(receipts.on_receipt, i),
                                          properties=dict(message.properties),
                                          deliver_after=_deliver_after(message.deliver_after_s))
            except Exception as e:  # noqa: BLE001 - whatever the client raised, only this message is lost
                refusals[i] = BrokerError(f"send to {self._topic} refused: {e}")
                receipts.refused()
        return _Window(receipts, refusals)

    def finish_window(self, window: _Window, deadline: float) -> tuple[list[str | BrokerError], bool]:
        """Wait (until ``deadline``, monotonic) for a started window: its results in order, and
        whether the broker stopped answering (a receipt missing or timed out)."""
        window.receipts.all_in.wait(max(0.0, deadline - time.monotonic()))
        results: list[str | BrokerError] = []
        stalled = False
        for i, outcome in enumerate(window.receipts.snapshot()):
            if i in window.refusals:
                results.append(window.refusals[i])
            elif outcome is None:
                stalled = True
                results.append(BrokerError(f"send to {self._topic} failed: no receipt within {WINDOW_WAIT_S:.0f} s"))
            elif outcome[0] == pulsar.Result.Ok:
                results.append(str(outcome[1]))
            else:
                stalled = stalled or outcome[0] == pulsar.Result.Timeout
                results.append(BrokerError(f"send to {self._topic} failed: {outcome[0]}"))
        return results, stalled

    def not_attempted(self, count: int) -> list[str | BrokerError]:
        """Failures for messages held back because this producer's broker stopped answering."""
        return [BrokerError(f"send to {self._topic} not attempted: earlier messages timed out") for _ in range(count)]

    def close(self) -> None:
        _close_quietly(self._producer, f"producer for {self._topic}")


def _received(msg: pulsar.Message) -> Received:
    return Received(
        data=msg.data(), properties=_properties(msg), topic=msg.topic_name(),
        message_id=str(msg.message_id()), publish_time_ms=msg.publish_timestamp(), handle=msg,
    )


def _properties(msg: pulsar.Message) -> dict[str, str]:
    """A message's properties, or none when the client cannot decode them (a producer in another
    language can send bytes that are not UTF-8): one message's properties must never stop the
    consumer or a DLQ listing.  They only ever carry retry bookkeeping, so losing them costs at
    most a retry count (a message without them is treated as fresh)."""
    try:
        return dict(msg.properties())
    except Exception as e:  # noqa: BLE001 - UnicodeDecodeError or whatever the binding raises for them
        _log.warning("message %s on %s: its properties cannot be decoded (%s); read without them",
                     msg.message_id(), msg.topic_name(), type(e).__name__)
        return {}


#: Where a process claims its group of read slots on pulsar-lite (:mod:`.read_slots`).
READ_GROUPS_TOPIC = "persistent://public/default/__ledger_deletion_read_groups"
#: How long claiming one group may take: a free one answers in milliseconds, a held one is refused,
#: which the client takes for a disconnect and retries until its operation timeout.
GROUP_CLAIM_TIMEOUT_S = 2

#: How long a read under a slot waits for its first message (the broker dispatches on subscribe, in
#: milliseconds): a slot someone acked or created at the latest position sends nothing, and a read
#: there goes on with Readers after this wait rather than :data:`READ_NEXT_MS`.
SLOT_FIRST_MS = 1000

#: How long a reader waits for the next message it was told is available.  A reader that waits longer
#: is replaced by a fresh one that starts after the last message received, at most
#: :data:`READ_RESUMES` times: pulsar-lite can stop dispatching to one reader while others read the
#: topic (measured: "a stored message did not arrive" with two listings at once).
READ_NEXT_MS = 5000
READ_RESUMES = 2
#: How long a reader looks for messages on a topic the broker says holds none (pulsar-lite answers
#: "Topic has no messages", which the client reports as ``UnknownError``): a stored message is
#: dispatched before that answer, so one arriving means the answer was about something else.
EMPTY_PEEK_MS = 20
#: … and then, having seen one, how long each further wait lasts until one times out.
NEVER_WRITTEN_PROBE_MS = 200


def _id_key(message_id: Any) -> tuple[int, int, int, int]:
    return message_id.ledger_id(), message_id.entry_id(), message_id.partition(), message_id.batch_index()


class _StoredRead:
    """What one read of a topic received so far: every message once, in the order first received.

    Why once: pulsar-lite dispatches some messages twice to one reader while other readers read the
    same topic (its dispatcher reads and then commits its read position without a lock, so two
    dispatches of one subscription can send the same entries; measured: two listings of 3,000 parked
    requests at once printed up to 3,139 rows).  A message id names one stored message, so a second
    delivery of an id is dropped here, before any listing, count or requeue sees it."""

    def __init__(self) -> None:
        self.messages: list[Received] = []
        self._seen: set[tuple[int, int, int, int]] = set()
        self.last: Any = None  # the client's MessageId of the newest message received

    def add(self, msg: pulsar.Message) -> None:
        key = _id_key(msg.message_id())
        if key in self._seen:
            return
        self._seen.add(key)
        self.messages.append(_received(msg))
        if self.last is None or key > _id_key(self.last):
            self.last = msg.message_id()


def _read_stored(reader: pulsar.Reader, read: _StoredRead) -> bool:
    """Until the broker says nothing more is stored (``has_message_available``, which bounds the read
    at the last message id it had when asked): True, or False when a message it announced did not
    arrive within :data:`READ_NEXT_MS` (the caller resumes with a fresh reader).  On pulsar-lite a
    topic never written answers with an error (:func:`_read_unannounced`)."""
    try:
        available = reader.has_message_available()
    except pulsar.UnknownError:
        if read.messages:
            raise  # a resumed reader on a topic already read from: that is no "never written"
        _read_unannounced(reader.read_next, read)
        return True
    while available:
        try:
            read.add(reader.read_next(READ_NEXT_MS))
        except pulsar.Timeout:
            return False
        available = reader.has_message_available()
    return True


def _read_unannounced(receive: Callable[[int], pulsar.Message], read: _StoredRead) -> None:
    """A topic the broker says holds nothing: one short peek confirms it (an empty DLQ costs
    :data:`EMPTY_PEEK_MS`, not a long probe: thousands of them are read per unscoped listing); a
    message arriving anyway means the answer meant something else, and the read goes on until a
    :data:`NEVER_WRITTEN_PROBE_MS` wait brings nothing.  ``receive``: a reader's ``read_next`` or a
    consumer's ``receive``."""
    wait_ms = EMPTY_PEEK_MS
    while True:
        try:
            read.add(receive(wait_ms))
        except pulsar.Timeout:
            return
        wait_ms = NEVER_WRITTEN_PROBE_MS


def _entry(message_id: Any) -> tuple[int, int]:
    return message_id.ledger_id(), message_id.entry_id()


def _read_subscription(consumer: pulsar.Consumer, read: _StoredRead) -> bool:
    """:func:`_read_stored` for a consumer of a subscription of :mod:`.read_slots`: what is stored is what
    comes up to the topic's last message id, asked once (the messages of a batch share an entry, so
    at that entry a short peek takes the rest).  True only when what arrived is provably the whole
    topic: every entry of its one ledger from the first to the last, in order.  Why so strict: anyone
    may subscribe under that name and ack, or create it at the latest position, and pulsar-lite
    cannot seek a subscription back (measured: "Failed to seek"), so such a read would miss messages.
    False, and Readers read, at the first entry out of order (one acked before it), when a message
    does not arrive within :data:`READ_NEXT_MS`, and when the last message id names no entry: that is
    what a consumer whose connection the broker just closed is told (pulsar-lite closes a connection
    when it refuses a subscribe on it, and restarts), not an empty topic."""
    try:
        stored = _entry(consumer.get_last_message_id())
    except pulsar.UnknownError:  # pulsar-lite's "Topic has no messages"
        _read_unannounced(consumer.receive, read)
        return not read.messages
    if stored[1] < 0:
        return False
    top = -1  # the highest entry received, all below it received too
    while top <= stored[1]:
        behind = top < stored[1]
        try:
            message = consumer.receive((SLOT_FIRST_MS if top < 0 else READ_NEXT_MS) if behind else EMPTY_PEEK_MS)
        except pulsar.Timeout:
            if behind:
                return False
            break
        ledger, entry = _entry(message.message_id())
        if ledger != stored[0] or entry > top + 1:
            return False
        top = max(top, entry)
        read.add(message)
    return True


class _Consumer(Consumer):
    def __init__(self, consumer: pulsar.Consumer) -> None:
        self._consumer = consumer

    def receive(self, timeout_s: float) -> Received | None:
        try:
            msg = self._consumer.receive(timeout_millis=max(1, int(timeout_s * 1000)))
        except pulsar.Timeout:
            return None
        except pulsar.PulsarException as e:
            raise BrokerError(f"receive failed: {e}") from e
        return _received(msg)

    def ack(self, message: Received) -> None:
        try:
            self._consumer.acknowledge(message.handle)
        except pulsar.PulsarException as e:
            raise BrokerError(f"ack of {message.message_id} failed: {e}") from e

    def close(self) -> None:
        _close_quietly(self._consumer, "consumer")

    @property
    def redelivers_on_request(self) -> bool:
        return True

    def redeliver_unacked(self) -> None:
        try:
            self._consumer.redeliver_unacknowledged_messages()
        except pulsar.PulsarException as e:
            raise BrokerError(f"asking for unacked messages again failed: {e}") from e


#: Subscribes tried on pulsar-lite when one times out (another process held the consumer id).
SUBSCRIBE_ATTEMPTS = 3

#: How long :meth:`PulsarBrokerClient.close` waits for the broker before going on without it.
CLOSE_WAIT_S = 3.0

#: How long :meth:`PulsarBrokerClient.acknowledge` waits for the next named message to be dispatched.
ACK_WAIT_S = 2.0
#: … and for messages that were probably acked already (an unacked one is dispatched at once).
LIKELY_ACKED_WAIT_S = 0.2


def _ack_named(consumer: pulsar.Consumer, wanted: dict[tuple[int, int], str],
               extra: dict[tuple[int, int], str] | None = None) -> None:
    """Ack the messages ``wanted`` names ((ledger, entry) → text) as they arrive; ack the rest by id.
    ``extra``: acked likewise, but only waited for while ``wanted`` are (or for one short wait)."""
    left, more = dict(wanted), dict(extra or {})
    while left or more:
        wait_s = ACK_WAIT_S if left else LIKELY_ACKED_WAIT_S
        try:
            message = consumer.receive(timeout_millis=int(wait_s * 1000))
        except pulsar.Timeout:
            break
        key = (message.message_id().ledger_id(), message.message_id().entry_id())
        if left.pop(key, None) is not None or more.pop(key, None) is not None:
            consumer.acknowledge(message)
    for text in (*left.values(), *more.values()):
        consumer.acknowledge(pulsar.MessageId(*_client_order(parse_message_id(text))))


def _claim_read_group(new_client: Callable[..., pulsar.Client],
                      long_lived: bool) -> tuple[int, pulsar.Client, pulsar.Consumer] | None:
    """A group of read slots no other process holds (:mod:`.read_slots`), held until the client closes by
    an Exclusive consumer on :data:`READ_GROUPS_TOPIC`, on a client of its own whose short operation
    timeout bounds what a held group costs (a refusal shows as a timeout).  A short command tries group
    0 first, a daemon the last group, so the daemons of a deployment never stand in a command's way;
    then every other group at once (whoever holds them all costs :data:`GROUP_CLAIM_TIMEOUT_S` twice,
    not once per group).  None when no group can be had: reads use Readers."""
    try:
        client = new_client(operation_timeout_seconds=GROUP_CLAIM_TIMEOUT_S)
    except (pulsar.PulsarException, ValueError):
        return None

    def claim(group: int) -> pulsar.Consumer | None:
        try:
            return client.subscribe(READ_GROUPS_TOPIC, f"group-{group}", receiver_queue_size=1,
                                    consumer_type=pulsar.ConsumerType.Exclusive)
        except pulsar.PulsarException:
            return None

    first = GROUPS - 1 if long_lived else 0
    consumer = claim(first)
    if consumer is not None:
        return first, client, consumer
    others = [g for g in range(GROUPS) if g != first]
    with ThreadPoolExecutor(len(others), thread_name_prefix="read-group") as pool:
        got = {g: c for g, c in zip(others, pool.map(claim, others), strict=True) if c is not None}
    if got:
        group = max(got) if long_lived else min(got)
        for other, held in got.items():
            if other != group:
                _close_quietly(held, "consumer claiming read slots")
        return group, client, got[group]
    _log.info("pulsar-lite: every group of read slots is held; reading with Readers")
    _close_quietly(client, "client claiming read slots")
    return None


def _client_order(parsed: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """``pulsar.MessageId``'s argument order (partition, ledger, entry, batch index)."""
    ledger, entry, partition, batch = parsed
    return partition, ledger, entry, batch


class PulsarBrokerClient(BrokerClient):
    def __init__(
        self,
        service_url: str,
        auth_token_file: Path | None = None,
        tls_trust_certs_file: Path | None = None,
        operation_timeout_s: int = 15,
        subscription_known: Callable[[str, str], bool] | None = None,
        long_lived: bool = True,
        credentials: BrokerCredentials | None = None,
        tls_allow_insecure_connection: bool = False,
    ) -> None:
        """``subscription_known``: asked before subscribing just to create a subscription.
        The embedded broker refuses a second process's consumer on a subscription a live
        daemon consumes (real Pulsar does not), so there we first ask its metrics.
        ``long_lived``: a daemon, which on pulsar-lite takes consumer ids of a block of its own;
        a short command keeps the first block, and so its sub-second start (:mod:`.consumer_ids`).
        ``credentials``: Pulsar's client authentication (:mod:`.authentication`), handed to pulsar-client's
        own plugin of that name."""
        auth = None
        if credentials is not None:
            auth = pulsar.Authentication(credentials.kind, credentials.parameters)
        elif auth_token_file is not None:
            try:
                token = Path(auth_token_file).read_text().strip()
            except OSError as e:
                raise BrokerError(f"cannot read broker token file {auth_token_file}: {e.strerror}") from e
            auth = pulsar.AuthenticationToken(token)
        self._new_client = partial(
            pulsar.Client, service_url, authentication=auth, connection_timeout_ms=5000, logger=_client_logger(),
            tls_trust_certs_file_path=str(tls_trust_certs_file) if tls_trust_certs_file else None,
            tls_allow_insecure_connection=tls_allow_insecure_connection)
        try:
            self._client = self._new_client(operation_timeout_seconds=operation_timeout_s)
        except (pulsar.PulsarException, ValueError) as e:
            raise BrokerError(f"invalid broker URL {service_url!r}: {e}") from e
        self.service_url = service_url
        self._subscription_known = subscription_known
        self._subscribed: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._consumer_ids = ConsumerIds(self._client, service_url, long_lived)
        self._long_lived = long_lived
        self._read_slots = ReadSlots(self._claim_read_group)
        self._read_group: tuple[pulsar.Client, pulsar.Consumer] | None = None

    def _subscribe(self, topics: str | list[str], subscription: str, **options: Any) -> pulsar.Consumer:
        """Every subscribe goes through here: on pulsar-lite, consumer ids must be unique across
        processes (see :mod:`.consumer_ids`); a refusal there shows as a timeout, after which the
        counter skips ahead and we subscribe once or twice more."""
        self._consumer_ids.before_subscribe()
        for attempt in range(SUBSCRIBE_ATTEMPTS):
            try:
                return self._client.subscribe(topics, subscription, **options)
            except pulsar.Timeout:
                if not self._consumer_ids.needed or attempt == SUBSCRIBE_ATTEMPTS - 1:
                    raise
                _log.warning("subscribing %s timed out on pulsar-lite (a consumer id taken by another "
                             "process?); trying with other ids", subscription)
                self._consumer_ids.skip_blocks()
        raise AssertionError("unreachable")

    def producer(self, topic: str) -> Producer:
        try:
            return _Producer(self._client.create_producer(topic, batching_enabled=False, block_if_queue_full=True,
                                                          send_timeout_millis=SEND_TIMEOUT_MS), topic)
        except pulsar.PulsarException as e:
            raise self._error(f"cannot create a producer on {topic}", e) from e

    def consumer(self, topics: list[str], subscription: str, receiver_queue_size: int = 1000) -> Consumer:
        try:
            return _Consumer(self._subscribe(
                topics, subscription, consumer_type=pulsar.ConsumerType.Shared,
                initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=receiver_queue_size,
            ))
        except pulsar.PulsarException as e:
            raise self._error(f"cannot subscribe {subscription}", e) from e

    def ensure_subscription(self, topic: str, subscription: str) -> None:
        with self._lock:
            if (topic, subscription) in self._subscribed:
                return
            if self._subscription_known is not None and self._subscription_known(topic, subscription):
                self._subscribed.add((topic, subscription))
                return
            try:
                consumer = self._subscribe(
                    topic, subscription, consumer_type=pulsar.ConsumerType.Shared,
                    initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=1,
                )
                consumer.close()
            except ConsumerBusy:
                pass  # someone consumes it: the subscription exists
            except pulsar.PulsarException as e:
                raise self._error(f"cannot create subscription {subscription} on {topic}", e) from e
            self._subscribed.add((topic, subscription))

    def send_batches(self, batches: Sequence[tuple[Producer, Sequence[Outgoing]]]) -> list[list[str | BrokerError]]:
        """All batches' windows in flight together from this thread (see :func:`_send_in_windows`);
        a producer not of this client's making goes through its own ``send_many``."""
        ours = [(k, (p, m)) for k, (p, m) in enumerate(batches) if isinstance(p, _Producer)]
        results: list[list[str | BrokerError]] = [[] for _ in batches]
        for (k, _), answers in zip(ours, _send_in_windows([batch for _, batch in ours]), strict=True):
            results[k] = answers
        for k, (producer, messages) in enumerate(batches):
            if not isinstance(producer, _Producer):
                results[k] = producer.send_many(messages)
        return results

    def read_all(self, topic: str) -> list[Received]:
        """Every stored message, each once (:class:`_StoredRead`), taking nothing from any consumer.
        On real Pulsar with Readers (each its own non-durable cursor); on pulsar-lite, which keeps a
        Reader's subscription for good, under a subscription of :mod:`.read_slots` when one is free."""
        if self._consumer_ids.is_pulsar_lite():
            slot = self._read_slots.take(topic)
            if slot is not None:
                try:
                    messages = self._read_on_slot(topic, slot)
                finally:
                    self._read_slots.give_back(topic, slot)
                if messages is not None:
                    return messages
        return self._read_with_readers(topic)

    def _read_with_readers(self, topic: str) -> list[Received]:
        """Readers from the earliest message; a reader that stalls is replaced, from where it stopped."""
        read = _StoredRead()
        for _ in range(READ_RESUMES + 1):
            start = pulsar.MessageId.earliest if read.last is None else read.last
            try:
                reader = self._client.create_reader(topic, start)
            except pulsar.PulsarException as e:
                raise self._error(f"cannot read {topic}", e) from e
            try:
                if _read_stored(reader, read):
                    return read.messages
            except pulsar.PulsarException as e:
                raise self._error(f"reading {topic} failed", e) from e
            finally:
                _close_quietly(reader, f"reader on {topic}")
            _log.info("reading %s: a stored message did not arrive within %d ms after %d message(s); "
                      "reading on with a fresh reader", topic, READ_NEXT_MS, len(read.messages))
        raise BrokerError(f"reading {topic}: a stored message did not arrive within {READ_NEXT_MS} ms, "
                          f"{READ_RESUMES + 1} readers in a row (is the broker overloaded?)")

    def _claim_read_group(self) -> int | None:
        claimed = _claim_read_group(self._new_client, self._long_lived)
        if claimed is None:
            return None
        group, self._read_group = claimed[0], claimed[1:]
        return group

    def _read_on_slot(self, topic: str, slot: int) -> list[Received] | None:
        """Every stored message, read under ``slot``'s subscription, Exclusive and never acked (closing
        hands them all back), on the client that holds this process's group: its own connection, so a
        refusal there (pulsar-lite then closes the connection) disturbs no consumer of the main client,
        and its short operation timeout bounds what a held slot costs.  None when the read cannot be
        trusted whole (:func:`_read_subscription`), fails in any way, or another process holds the slot
        (the subscribe times out): the caller reads with Readers."""
        assert self._read_group is not None, "a slot is taken only once a group is claimed"
        client = self._read_group[0]
        try:
            consumer = client.subscribe(topic, slot_name(slot), consumer_type=pulsar.ConsumerType.Exclusive,
                                        initial_position=pulsar.InitialPosition.Earliest)
        except pulsar.Timeout:
            _log.info("reading %s: subscription %s is held elsewhere; reading it with Readers", topic, slot_name(slot))
            self._read_slots.held_elsewhere(topic)
            return None
        except pulsar.PulsarException as e:
            _log.info("reading %s under %s failed (%s); reading with Readers", topic, slot_name(slot), e)
            return None
        read = _StoredRead()
        whole = False
        try:
            whole = _read_subscription(consumer, read)
        except pulsar.PulsarException as e:
            _log.info("reading %s under %s failed (%s); reading with Readers", topic, slot_name(slot), e)
            return None
        finally:
            if not whole:
                _drop_quietly(consumer, f"subscription {slot_name(slot)} on {topic}")
            _close_quietly(consumer, f"consumer reading {topic}")
        if whole:
            return read.messages
        _log.info("reading %s: %d message(s) under %s are not provably all it stores; reading with Readers",
                  topic, len(read.messages), slot_name(slot))
        self._read_slots.spoiled(topic)
        return None

    def acknowledge(self, topic: str, subscription: str, message_ids: Sequence[str],
                    likely_acked: Sequence[str] = ()) -> None:
        """Receive until every named message has been dispatched to us, ack exactly those, close (the
        others go back to the subscription at once).  Why receive at all: pulsar-lite ignores an ack for
        a message it has not dispatched to some consumer (measured), where real Pulsar applies an ack
        to any position.  A named message that does not arrive within :data:`ACK_WAIT_S` (held by
        another consumer, or already acked) is acked by id, which both brokers apply then.

        ``likely_acked`` (the DLQ's settlement markers, re-acked by every purge or requeue in case
        a crash left one unacked) are acked as they come, but waited for only while ``message_ids``
        are: an already-acked message never comes, and waiting for each cost 2 s per DLQ."""
        try:
            wanted = {parse_message_id(text)[:2]: text for text in message_ids}
            extra = {parse_message_id(text)[:2]: text for text in likely_acked}
        except ValueError as e:
            raise BrokerError(str(e)) from e
        try:
            consumer = self._subscribe(topic, subscription, consumer_type=pulsar.ConsumerType.Shared,
                                       initial_position=pulsar.InitialPosition.Earliest)
        except pulsar.PulsarException as e:
            raise self._error(f"cannot subscribe {subscription} on {topic} to acknowledge", e) from e
        try:
            _ack_named(consumer, wanted, extra)
        except pulsar.PulsarException as e:
            raise self._error(f"acknowledging on {topic} failed", e) from e
        finally:
            _close_quietly(consumer, f"consumer on {topic}")

    def partitions(self, topic: str) -> int:
        try:
            names = self._client.get_topic_partitions(topic)
        except pulsar.PulsarException as e:
            raise self._error(f"cannot read partitions of {topic}", e) from e
        return 0 if names == [topic] else len(names)

    def keeps_partition_metadata(self) -> bool:
        return not self._consumer_ids.is_pulsar_lite()

    def _error(self, what: str, e: Exception) -> BrokerError:
        hint = " (is the broker running and reachable?)" if isinstance(e, pulsar.Timeout | pulsar.ConnectError) else ""
        return BrokerError(f"{what} at {self.service_url}: {e}{hint}")

    def close(self) -> None:
        """Bounded by :data:`CLOSE_WAIT_S`: a frozen broker makes the client's close wait out every
        producer's flush, and a daemon asked to stop must not outlive its grace period for that."""
        clients = [self._client] + ([self._read_group[0]] if self._read_group is not None else [])
        closing = threading.Thread(target=lambda: [_close_quietly(c, "client") for c in clients],
                                   name="pulsar-close", daemon=True)
        closing.start()
        closing.join(CLOSE_WAIT_S)
        if closing.is_alive():
            _log.warning("the broker did not confirm closing the client within %.0f s; going on without it",
                         CLOSE_WAIT_S)
