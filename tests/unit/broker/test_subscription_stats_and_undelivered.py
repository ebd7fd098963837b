"""A broker's subscription stats as read from its ``/metrics`` and admin REST, and the rule that calls requests
undelivered: handed to a consumer, unacknowledged, and the subscription quiet for 30 s on the broker's clock."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from deletion_service.broker.subscription_stats import (
    StatsReading,
    SubscriptionStats,
    broker_time,
    counted_topics,
    parse_metrics,
    parse_rest,
    topic_of,
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


def test_only_the_wanted_lines_are_parsed_and_the_answer_is_the_whole_pages() -> None:
    """A page with every family Pulsar writes per subscription, comments, other subscriptions (one whose
    name holds ours), a name with a quote, a backslash and a newline, and a label set in another order:
    the lines kept for the parser give the answer the whole page gives."""
    odd = 'ledger "deletion"\\\nx'
    escaped = odd.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    page = ["# HELP pulsar_subscription_back_log backlog", "# TYPE pulsar_subscription_back_log gauge"]
    for i, sub in enumerate(["ledger-deletion", "ledger-deletion-dlq", "my-ledger-deletion", escaped]):
        for name in ("pulsar_subscription_back_log", "pulsar_subscription_unacked_messages",
                     "pulsar_subscription_msg_rate_out", "pulsar_subscription_last_consumed_timestamp",
                     "pulsar_subscription_last_acked_timestamp", "pulsar_subscription_back_log_other"):
            page.append(f'{name}{{namespace="t/ns",partition="{i}",subscription="{sub}",topic="a"}} {i + 1}')
        page.append(f'pulsar_subscription_back_log{{subscription="{sub}",topic="b",namespace="t/ns"}} {10 * i}')
    page += [f'pulsar_subscriptions_count{{namespace="t/ns",partition="{i}",topic="a"}} {i}' for i in range(4)]
    text = "\n".join(page) + "\n"

    def whole_page(subscription: str) -> dict[str, SubscriptionStats]:
        found: dict[str, dict[str, float]] = {}
        fields = {"pulsar_subscription_back_log": "backlog", "pulsar_subscription_unacked_messages": "unacked",
                  "pulsar_subscription_last_consumed_timestamp": "consumed_at",
                  "pulsar_subscription_last_acked_timestamp": "acked_at"}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name in fields and s.labels.get("subscription") == subscription:
                    values = found.setdefault(topic_of(s.labels), {})
                    values[fields[s.name]] = values.get(fields[s.name], 0.0) + s.value
        return {t: SubscriptionStats(int(v.get("backlog", 0)), int(v["unacked"]) if "unacked" in v else None,
                                     max(v[k] for k in ("consumed_at", "acked_at") if k in v) if v.keys()
                                     & {"consumed_at", "acked_at"} else None) for t, v in found.items()}

    for subscription in ("ledger-deletion", "ledger-deletion-dlq", "my-ledger-deletion", odd, "absent"):
        assert parse_metrics(text, subscription) == whole_page(subscription), subscription
    assert parse_metrics(text, odd)["persistent://t/ns/a-partition-3"] == SubscriptionStats(4, 4, 4.0)
    assert counted_topics(text) == {f"persistent://t/ns/a-partition-{i}" for i in (1, 2, 3)}
