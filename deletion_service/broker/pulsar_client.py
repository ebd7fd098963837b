"""The broker interface on the official ``pulsar-client`` (a real cluster or pulsar-lite)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pulsar

from deletion_service.broker.interface import BrokerClient, BrokerError, Consumer, Producer, Received

_log = logging.getLogger(__name__)


def _client_logger() -> logging.Logger:
    """pulsar-client logs every connection at INFO; route it through logging at WARNING."""
    logger = logging.getLogger("pulsar-client")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.WARNING)
    return logger


class _Producer(Producer):
    def __init__(self, producer: pulsar.Producer, topic: str) -> None:
        self._producer = producer
        self._topic = topic

    def send(self, data: bytes, properties: dict[str, str] | None = None, deliver_after_s: float = 0) -> str:
        kwargs = {"deliver_after": timedelta(seconds=deliver_after_s)} if deliver_after_s > 0 else {}
        try:
            return str(self._producer.send(data, properties=properties or {}, **kwargs))
        except pulsar.PulsarException as e:
            raise BrokerError(f"send to {self._topic} failed: {e}") from e

    def close(self) -> None:
        try:
            self._producer.close()
        except pulsar.PulsarException as e:
            _log.debug("closing producer for %s: %s", self._topic, e)


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
        return Received(
            data=msg.data(), properties=dict(msg.properties()), topic=msg.topic_name(),
            message_id=str(msg.message_id()), publish_time_ms=msg.publish_timestamp(), handle=msg,
        )

    def ack(self, message: Received) -> None:
        try:
            self._consumer.acknowledge(message.handle)
        except pulsar.PulsarException as e:
            raise BrokerError(f"ack of {message.message_id} failed: {e}") from e

    def close(self) -> None:
        try:
            self._consumer.close()
        except pulsar.PulsarException as e:
            _log.debug("closing consumer: %s", e)


class PulsarBrokerClient(BrokerClient):
    def __init__(
        self,
        service_url: str,
        auth_token_file: Path | None = None,
        tls_trust_certs_file: Path | None = None,
        operation_timeout_s: int = 15,
        subscription_known: Callable[[str, str], bool] | None = None,
    ) -> None:
        """``subscription_known``: asked before subscribing just to create a subscription.
        The embedded broker refuses a second process's consumer on a subscription a live
        daemon consumes (real Pulsar does not), so there we first ask its metrics."""
        auth = None
        if auth_token_file is not None:
            try:
                token = Path(auth_token_file).read_text().strip()
            except OSError as e:
                raise BrokerError(f"cannot read broker token file {auth_token_file}: {e.strerror}") from e
            auth = pulsar.AuthenticationToken(token)
        try:
            self._client = pulsar.Client(
                service_url, authentication=auth, operation_timeout_seconds=operation_timeout_s,
                connection_timeout_ms=5000, logger=_client_logger(),
                tls_trust_certs_file_path=str(tls_trust_certs_file) if tls_trust_certs_file else None,
            )
        except (pulsar.PulsarException, ValueError) as e:
            raise BrokerError(f"invalid broker URL {service_url!r}: {e}") from e
        self.service_url = service_url
        self._subscription_known = subscription_known
        self._subscribed: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def producer(self, topic: str) -> Producer:
        try:
            return _Producer(self._client.create_producer(topic, batching_enabled=False, block_if_queue_full=True,
                                                          send_timeout_millis=15_000), topic)
        except pulsar.PulsarException as e:
            raise self._error(f"cannot create a producer on {topic}", e) from e

    def consumer(self, topics: list[str], subscription: str, receiver_queue_size: int = 1000) -> Consumer:
        try:
            return _Consumer(self._client.subscribe(
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
                consumer = self._client.subscribe(
                    topic, subscription, consumer_type=pulsar.ConsumerType.Shared,
                    initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=1,
                )
                consumer.close()
            except pulsar.exceptions.ConsumerBusy:
                pass  # someone consumes it: the subscription exists
            except pulsar.PulsarException as e:
                raise self._error(f"cannot create subscription {subscription} on {topic}", e) from e
            self._subscribed.add((topic, subscription))

    def partitions(self, topic: str) -> int:
        try:
            names = self._client.get_topic_partitions(topic)
        except pulsar.PulsarException as e:
            raise self._error(f"cannot read partitions of {topic}", e) from e
        return 0 if names == [topic] else len(names)

    def _error(self, what: str, e: Exception) -> BrokerError:
        hint = " (is the broker running and reachable?)" if isinstance(e, pulsar.Timeout | pulsar.ConnectError) else ""
        return BrokerError(f"{what} at {self.service_url}: {e}{hint}")

    def close(self) -> None:
        try:
            self._client.close()
        except pulsar.PulsarException as e:
            _log.debug("closing client: %s", e)
