"""Consumer ids unique across processes: a workaround for pulsar-lite 0.2.0, which daemon replicas need.

Real Pulsar keys a consumer id per connection.  pulsar-lite keys it per subscription, across
connections, and the C++ client under ``pulsar-client`` numbers the consumers of every client
0, 1, 2, … (``ClientImpl::newConsumerId``; neither the Python nor the C++ API lets a caller
choose one).  So the second process to consume a subscription another live process consumes
is refused ("Consumer 0 already exists"; the broker closes that connection), and its client,
which takes the refusal for a disconnect and retries, reports a timeout after
``operation_timeout_seconds``.  The refusal costs the process already consuming nothing
(measured: it keeps receiving); the newcomer just never gets a consumer.

So, against pulsar-lite only (recognised by the ``server_version`` of its Connected reply, read
by :func:`server_version` over one short raw connection), a client moves its id counter to a
block of its own before its first consumer:

1. a ticket: the entry id of one message it sends to :data:`TICKET_TOPIC` (the broker assigns
   entry ids one at a time, so processes starting together get consecutive tickets);
2. its block, ``ticket % (BLOCKS - 1) + 1``: it burns ``block * BLOCK_SIZE`` ids by subscribing
   that many consumers, all in flight together, to one Shared subscription of its own on
   :data:`BURN_TOPIC` (creating consumers is the only thing that advances the counter), then
   closing them and unsubscribing: about 0.2 ms of the broker's CPU each.

   Burning never uses readers, nor the ticket topic: pulsar-lite keeps every reader's subscription
   after the reader closes, lists each in ``/metrics`` and walks them on every send to their topic,
   and a reader from the earliest message is sent the topic's whole backlog.  Burnt with readers on
   the ticket topic, a broker that had seen a few hundred daemons start spent more CPU on those
   dead subscriptions (4 MB of ``/metrics`` per scrape, hundreds of tickets pushed to every reader)
   than on everything else; one subscription per burn, on a topic that never holds a message,
   costs it nothing.

Only long-lived clients (daemons) move: a short command (``inflight``, ``dlq list``) keeps block 0,
which no daemon takes, so it starts in well under a second (burning cost it 0.5 s on average and up
to 3 s); two short commands on one subscription at once can still meet, and retry as below.
A process that uses more than :data:`BLOCK_SIZE` ids (a daemon uses about twice its partition
count), or :data:`BLOCKS` more processes started while one lives, can still collide: that
subscribe times out, and :class:`~deletion_service.broker.pulsar_client.PulsarBrokerClient`
skips a random number of blocks and subscribes again.  Nothing here runs against real Pulsar.
"""

from __future__ import annotations

import contextlib
import logging
import random
import socket
import struct
import threading
import uuid
from urllib.parse import urlsplit

import _pulsar
import pulsar

_log = logging.getLogger(__name__)

#: Where tickets are taken: one message per client that consumes (pulsar-lite only).
TICKET_TOPIC = "persistent://public/default/__pulsar_lite_consumer_id_tickets"
#: Where ids are burnt: subscriptions only, never a message.
BURN_TOPIC = "persistent://public/default/__pulsar_lite_consumer_id_burn"
#: Ids a process may use before it reaches the next block.
BLOCK_SIZE = 32
#: Blocks tickets are spread over: at most ``(BLOCKS - 1) * BLOCK_SIZE`` ids burnt by one client.
BLOCKS = 16
#: The version string pulsar-lite puts in its Connected reply ("Pulsar-Lite-0.1.0" in 0.2.0).
PULSAR_LITE_SERVER = "pulsar-lite"

_CONNECT, _CONNECTED = 2, 3  # BaseCommand.Type
_PROTOCOL_VERSION = 15


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def _fields(data: bytes) -> dict[int, bytes | int]:
    """The top-level fields of a protobuf message (last one wins), enough for two small replies."""
    out: dict[int, bytes | int] = {}
    at = 0
    while at < len(data):
        key, at = _read_varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            out[number], at = _read_varint(data, at)
        elif wire == 2:
            size, at = _read_varint(data, at)
            out[number], at = data[at:at + size], at + size
        else:
            at += 8 if wire == 1 else 4
    return out


def _connect_frame() -> bytes:
    connect = b"\x0a" + _varint(len(b"ledger-deletion")) + b"ledger-deletion" + b"\x20" + _varint(_PROTOCOL_VERSION)
    command = b"\x08" + _varint(_CONNECT) + b"\x12" + _varint(len(connect)) + connect
    return struct.pack(">II", len(command) + 4, len(command)) + command


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise OSError("connection closed")
        data += chunk
    return data


def server_version(service_url: str, timeout_s: float = 2.0) -> str | None:
    """The broker's ``server_version`` from a Connect/Connected exchange on a plain ``pulsar://``
    URL (the first host of a list); ``None`` when it cannot be read (TLS, auth, unreachable)."""
    parts = urlsplit(service_url.split(",")[0])
    if parts.scheme != "pulsar" or parts.hostname is None:
        return None
    try:
        with socket.create_connection((parts.hostname, parts.port or 6650), timeout=timeout_s) as sock:
            sock.sendall(_connect_frame())
            total = struct.unpack(">I", _read_exactly(sock, 4))[0]
            frame = _read_exactly(sock, total)
        command = _fields(frame[4:4 + struct.unpack(">I", frame[:4])[0]])
        connected = command.get(3)
        if command.get(1) != _CONNECTED or not isinstance(connected, bytes):
            return None
        version = _fields(connected).get(1)
        return version.decode(errors="replace") if isinstance(version, bytes) else None
    except (OSError, ValueError, IndexError, struct.error):
        return None


class ConsumerIds:
    """Moves one client's consumer-id counter to a block of its own, once, on pulsar-lite."""

    def __init__(self, client: pulsar.Client, service_url: str, long_lived: bool = True) -> None:
        self._client = client
        self._service_url = service_url
        self._long_lived = long_lived
        self._lock = threading.Lock()
        self._checked = False
        self._moved = False
        self.needed = False
        self.burnt = 0

    def is_pulsar_lite(self) -> bool:
        """Whether the broker said it is pulsar-lite (asked once it answers; False until then)."""
        with self._lock:
            self._check()
            return self.needed

    def _check(self) -> None:
        if self._checked:
            return
        version = server_version(self._service_url)
        if version is None:
            return  # unreadable now (broker down?) or never (TLS, auth): asked again next time
        self._checked = True
        self.needed = version.lower().startswith(PULSAR_LITE_SERVER)

    def before_subscribe(self) -> None:
        """Called before every subscribe: the first on pulsar-lite moves the counter to its block."""
        with self._lock:
            if self._moved:
                return
            self._check()
            if self._checked:
                self._moved = True
                if self.needed and self._long_lived:  # block 0 is the short commands'
                    self._burn((self._ticket() % (BLOCKS - 1) + 1) * BLOCK_SIZE)

    def skip_blocks(self) -> None:
        """After a refused subscribe: jump a random 1 to ``BLOCKS - 1`` blocks further on."""
        with self._lock:
            self._burn(random.randrange(1, BLOCKS) * BLOCK_SIZE)

    def _ticket(self) -> int:
        producer = self._client.create_producer(TICKET_TOPIC, batching_enabled=False)
        try:
            return int(producer.send(b"").entry_id())
        finally:
            producer.close()

    def _burn(self, count: int) -> None:
        """``count`` consumers subscribed together on a subscription of their own, then closed and the
        subscription dropped: ``count`` consumer ids used up (a refused subscribe uses its id too)."""
        done = threading.Semaphore(0)
        consumers: list[object] = []

        def subscribed(result: object, consumer: object) -> None:
            consumers.append((result, consumer))
            done.release()

        conf = _pulsar.ConsumerConfiguration()
        conf.consumer_type(_pulsar.ConsumerType.Shared)  # many consumers of one client on one subscription
        subscription = f"id-burn-{uuid.uuid4().hex[:12]}"  # its own: no other process's ids to meet
        for _ in range(count):
            self._client._client.subscribe_async(  # noqa: SLF001 - the async call the Python API lacks
                BURN_TOPIC, subscription, conf, subscribed)
        for _ in range(count):
            done.acquire()
        subscribed_ok = [consumer for result, consumer in consumers if result == pulsar.Result.Ok]  # type: ignore[misc]
        for consumer in subscribed_ok[1:]:
            consumer.close()  # type: ignore[attr-defined]
        if subscribed_ok:
            try:
                subscribed_ok[0].unsubscribe()  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - the ids are burnt either way; a kept subscription costs little
                with contextlib.suppress(Exception):
                    subscribed_ok[0].close()  # type: ignore[attr-defined]
        self.burnt += count
        _log.debug("pulsar-lite: %d consumer ids skipped (%d in all)", count, self.burnt)
