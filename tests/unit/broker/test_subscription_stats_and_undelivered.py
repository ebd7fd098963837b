"""A broker's subscription stats as read from its ``/metrics`` and admin REST, and the rule that calls requests
undelivered: handed to a consumer, unacknowledged, and the subscription quiet for 30 s on the broker's clock."""

from __future__ import annotations

from deletion_service.broker.subscription_stats import (
    StatsReading,
    SubscriptionStats,
    broker_time,
    counted_topics,
    parse_metrics,
    parse_rest,
)
from deletion_service.inflight import undelivered

LABELS = 'namespace="pulsar/system",partition="0",subscription="ledger-deletion",topic="__ld"'
METRICS = f"""pulsar_subscription_back_log{{{LABELS}}} 300
pulsar_subscription_unacked_messages{{{LABELS}}} 300
pulsar_subscription_last_consumed_timestamp{{{LABELS}}} 1000.5
pulsar_subscription_last_acked_timestamp{{{LABELS}}} 0
pulsar_subscriptions_count{{namespace="pulsar/system",partition="0",topic="__ld"}} 3
pulsar_subscription_back_log{{namespace="pulsar/system",partition="-1",subscription="other",topic="__ld-RETRY"}} 9
"""
TOPIC = "persistent://pulsar/system/__ld-partition-0"


def test_pulsar_lite_metrics_give_backlog_unacked_and_the_last_activity_per_topic() -> None:
    assert parse_metrics(METRICS, "ledger-deletion") == {TOPIC: SubscriptionStats(300, 300, 1000.5)}
    assert counted_topics(METRICS) == {TOPIC}


def test_admin_rest_times_in_milliseconds_are_read_as_seconds() -> None:
    stats = {"subscriptions": {"ledger-deletion": {"msgBacklog": 4, "unackedMessages": 2,
                                                   "lastConsumedTimestamp": 1_700_000_000_000,
                                                   "lastAckedTimestamp": 1_700_000_005_000}}}
    assert parse_rest(stats, "ledger-deletion") == SubscriptionStats(4, 2, 1_700_000_005.0)
    assert parse_rest({}, "ledger-deletion") == SubscriptionStats(0, None, None)


def test_the_broker_clock_comes_from_its_date_header() -> None:
    assert broker_time("Fri, 27 Nov 2026 08:37:25 GMT") == 1795768645.0
    assert broker_time(None) is None and broker_time("not a date") is None


def test_unacked_requests_on_a_topic_quiet_for_30_s_are_undelivered_unless_this_process_holds_some() -> None:
    quiet = StatsReading({TOPIC: SubscriptionStats(300, 300, 1000.0)}, broker_now=1031.0)
    assert undelivered(quiet).by_topic == {TOPIC: 300}
    assert undelivered(quiet, held_from={TOPIC}).total == 0
    busy = StatsReading({TOPIC: SubscriptionStats(300, 300, 1000.0)}, broker_now=1029.0)
    assert undelivered(busy).total == 0
    nothing_handed_out = StatsReading({TOPIC: SubscriptionStats(5, 0, 0.0)}, broker_now=5000.0)
    assert undelivered(nothing_handed_out).total == 0
    no_clock = StatsReading({TOPIC: SubscriptionStats(300, 300, 1000.0)})
    assert undelivered(no_clock).total == 0
