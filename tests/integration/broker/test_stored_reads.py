"""Reading a topic's stored messages on pulsar-lite (``read_all``: DLQ listings, the audit trail) leaves
the broker as it found it: the same few subscriptions however many reads, every message each time,
reads at once each complete, and a slot another process holds left for a Reader."""

from __future__ import annotations

import re
import uuid
from concurrent.futures import ThreadPoolExecutor

import pulsar

from deletion_service.broker.pulsar_client import PulsarBrokerClient
from deletion_service.broker.read_slots import SLOTS, slot_name
from tests.support.harness import PulsarLiteBroker, wait_until


def _topic() -> str:
    return f"persistent://public/default/stored-{uuid.uuid4().hex[:10]}"


def _subscriptions(broker: PulsarLiteBroker, topic: str) -> set[str]:
    """The topic's subscriptions as the broker's page names them (``topic`` there is the local name)."""
    found = set()
    for line in broker.metrics_text().splitlines():
        if line.startswith("pulsar_subscription_back_log{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            if labels.get("topic") == topic.rsplit("/", 1)[1] and "subscription" in labels:
                found.add(labels["subscription"])
    return found


def _stored(client: PulsarBrokerClient, topic: str, count: int) -> list[str]:
    producer = client.producer(topic)
    try:
        return [producer.send(f"m{n}".encode()) for n in range(count)]
    finally:
        producer.close()


def test_reads_again_and_again_keep_one_subscription_where_each_reader_leaves_its_own(
        pulsar_broker: PulsarLiteBroker) -> None:
    """Three processes one after another (clients closed in turn), each reading twice: one
    subscription of ours on the topic, where each Reader leaves one the broker keeps."""
    topic = _topic()
    raw = pulsar.Client(pulsar_broker.service_url, operation_timeout_seconds=5)
    try:
        writer = PulsarBrokerClient(pulsar_broker.service_url, long_lived=False)
        sent = _stored(writer, topic, 3)
        writer.close()
        for _ in range(3):
            client = PulsarBrokerClient(pulsar_broker.service_url, long_lived=False)
            try:
                for _ in range(2):
                    assert [m.message_id for m in client.read_all(topic)] == sent
            finally:
                client.close()
        for _ in range(2):  # what each read cost before: a Reader, whose subscription the broker keeps
            raw.create_reader(topic, pulsar.MessageId.earliest).close()
        # the broker's figures lag: wait until they show the two readers, then look at ours
        wait_until(lambda: len(_subscriptions(pulsar_broker, topic)) >= 3, 30, "the readers' subscriptions shown")
        ours = {s for s in _subscriptions(pulsar_broker, topic) if s.startswith("ledger-deletion-read-")}
        assert ours == {slot_name(0)}
        assert len(_subscriptions(pulsar_broker, topic)) == 3
    finally:
        raw.close()


def test_reads_at_once_from_three_processes_each_see_every_message_once(pulsar_broker: PulsarLiteBroker) -> None:
    """Three clients stand for three processes (each numbers its consumers from 0); two reads at once
    in each, as the daemon's gauge and its admin API read one DLQ."""
    topic = _topic()
    clients = [PulsarBrokerClient(pulsar_broker.service_url, long_lived=False, operation_timeout_s=5) for _ in range(3)]
    try:
        sent = _stored(clients[0], topic, 200)
        with ThreadPoolExecutor(6) as pool:
            reads = list(pool.map(lambda c: [m.message_id for m in c.read_all(topic)], clients * 2))
        assert all(read == sent for read in reads), [len(read) for read in reads]
    finally:
        for client in clients:
            client.close()


def test_a_slot_another_process_holds_is_left_and_the_read_is_still_whole(pulsar_broker: PulsarLiteBroker) -> None:
    """Every slot of the topic held by another process (Exclusive consumers): the read goes on with
    Readers after one refused subscribe, and the next without waiting again; each returns every
    message once.  The holders created the slots at the latest position, which pulsar-lite cannot
    seek back: a later process finds nothing under them and reads with Readers, whole."""
    topic = _topic()
    client = PulsarBrokerClient(pulsar_broker.service_url, long_lived=False, operation_timeout_s=2)
    other = pulsar.Client(pulsar_broker.service_url, operation_timeout_seconds=5)
    try:
        sent = _stored(client, topic, 20)
        holders = [other.subscribe(topic, slot_name(n), consumer_type=pulsar.ConsumerType.Exclusive)
                   for n in range(SLOTS)]
        assert [m.message_id for m in client.read_all(topic)] == sent
        assert [m.message_id for m in client.read_all(topic)] == sent
        for holder in holders:
            holder.close()
        later = PulsarBrokerClient(pulsar_broker.service_url, long_lived=False, operation_timeout_s=2)
        try:
            assert [m.message_id for m in later.read_all(topic)] == sent
        finally:
            later.close()
    finally:
        other.close()
        client.close()


def test_messages_someone_acked_under_a_slot_are_still_read(pulsar_broker: PulsarLiteBroker) -> None:
    """Anyone may subscribe under a slot's name and ack there (cumulatively, one by one, the last
    message): a read that does not receive every entry from the first to the last reads with a Reader."""
    topic = _topic()
    client = PulsarBrokerClient(pulsar_broker.service_url, long_lived=False, operation_timeout_s=5)
    other = pulsar.Client(pulsar_broker.service_url, operation_timeout_seconds=5)
    try:
        sent = _stored(client, topic, 10)
        for n in range(SLOTS):
            consumer = other.subscribe(topic, slot_name(n), consumer_type=pulsar.ConsumerType.Exclusive,
                                       initial_position=pulsar.InitialPosition.Earliest)
            received = [consumer.receive(5000) for _ in sent]
            consumer.acknowledge_cumulative(received[1])
            consumer.acknowledge(received[n % 7 + 2])
            if n % 2:
                consumer.acknowledge(received[-1])
            consumer.close()
        for _ in range(2):
            assert [m.message_id for m in client.read_all(topic)] == sent
    finally:
        other.close()
        client.close()


def test_a_slot_someone_acked_in_is_dropped_so_the_next_read_under_it_is_whole_again(
        pulsar_broker: PulsarLiteBroker) -> None:
    """What was acked under a slot never comes back to it: kept, it would send every later read to
    Readers after a wait.  The read that finds it not whole drops it, and the name then reads every
    entry again."""
    topic = _topic()
    client = PulsarBrokerClient(pulsar_broker.service_url, long_lived=False, operation_timeout_s=5)
    other = pulsar.Client(pulsar_broker.service_url, operation_timeout_seconds=5)
    try:
        sent = _stored(client, topic, 5)
        spoiler = other.subscribe(topic, slot_name(0), consumer_type=pulsar.ConsumerType.Exclusive,
                                  initial_position=pulsar.InitialPosition.Earliest)
        spoiler.acknowledge([spoiler.receive(5000) for _ in sent][-1])
        spoiler.close()
        assert [m.message_id for m in client.read_all(topic)] == sent  # read by a Reader: whole
        client.close()
        again = other.subscribe(topic, slot_name(0), consumer_type=pulsar.ConsumerType.Exclusive,
                                initial_position=pulsar.InitialPosition.Earliest)
        try:
            assert [again.receive(5000).data() for _ in sent] == [f"m{n}".encode() for n in range(5)]
        finally:
            again.close()
    finally:
        other.close()
        client.close()


def test_a_held_slot_costs_the_reads_beside_it_nothing(pulsar_broker: PulsarLiteBroker) -> None:
    """A client holds every slot of four topics while one process reads those and three more, 16 at once
    (as an unscoped ``dlq list`` does).  pulsar-lite refuses the held subscribes by closing the
    connection they came on, and a read beside them on that connection is told the topic's last
    message id names no entry: that is no empty topic.  Every read returns every message."""
    other = pulsar.Client(pulsar_broker.service_url, operation_timeout_seconds=5)
    held_topics, beside = [_topic() for _ in range(4)], [_topic() for _ in range(3)]
    client = PulsarBrokerClient(pulsar_broker.service_url, long_lived=False)
    try:
        sent = {topic: _stored(client, topic, 5) for topic in held_topics + beside}
        holders = [other.subscribe(topic, slot_name(n), consumer_type=pulsar.ConsumerType.Exclusive,
                                   receiver_queue_size=1) for topic in held_topics for n in range(SLOTS)]
        for _ in range(2):
            reader = PulsarBrokerClient(pulsar_broker.service_url, long_lived=False)
            try:
                with ThreadPoolExecutor(16) as pool:
                    reads = dict(zip(sent, pool.map(reader.read_all, sent), strict=True))
            finally:
                reader.close()
            assert {t: [m.message_id for m in read] for t, read in reads.items()} == sent
        for holder in holders:
            holder.close()
    finally:
        other.close()
        client.close()
