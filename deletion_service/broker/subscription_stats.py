"""What a broker says of one subscription on one topic: its backlog, what it handed to consumers and
they have not acknowledged, and when it last delivered or was acknowledged anything.

Two spellings of the same facts, read here and nowhere else:

- a broker's Prometheus ``/metrics`` (pulsar-lite's, and a Pulsar broker's with topic-level
  metrics): ``pulsar_subscription_back_log``, ``pulsar_subscription_unacked_messages``,
  ``pulsar_subscription_last_consumed_timestamp`` and ``pulsar_subscription_last_acked_timestamp``
  labelled ``namespace``, ``topic``, ``partition``, ``subscription`` (pulsar-lite writes the times in
  seconds, Pulsar in milliseconds: both are read);
- a Pulsar admin REST topic-stats document: ``msgBacklog``, ``unackedMessages``,
  ``lastConsumedTimestamp``, ``lastAckedTimestamp`` (milliseconds) of ``subscriptions[name]``.

The broker's own clock stamps both the times and the answer (its HTTP ``Date`` header), so how long
a subscription has been quiet is measured on one clock, whatever ours says.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from deletion_service.broker.interface import BrokerError

BACKLOG_METRIC = "pulsar_subscription_back_log"
UNACKED_METRIC = "pulsar_subscription_unacked_messages"
CONSUMED_AT_METRIC = "pulsar_subscription_last_consumed_timestamp"
ACKED_AT_METRIC = "pulsar_subscription_last_acked_timestamp"
SUBSCRIPTIONS_METRIC = "pulsar_subscriptions_count"
_FIELDS = {BACKLOG_METRIC: "backlog", UNACKED_METRIC: "unacked", CONSUMED_AT_METRIC: "consumed_at",
           ACKED_AT_METRIC: "acked_at"}


@dataclass(frozen=True)
class SubscriptionStats:
    """One subscription on one topic, as the broker last counted it.

    ``backlog``: messages not yet acknowledged, as the broker counts them (pulsar-lite also counts
    messages acknowledged after the oldest unacknowledged one).  ``unacked``: of those, the ones
    handed to a consumer and not acknowledged (None: the broker does not say).  ``active_at``: the
    broker's time of its last delivery or acknowledgement on this subscription (Unix seconds; 0: never;
    None: not said)."""

    backlog: int = 0
    unacked: int | None = None
    active_at: float | None = None


@dataclass(frozen=True)
class StatsReading:
    """Every topic's stats from one answer of the broker, and the broker's clock when it answered
    (None when it did not say).  ``counted``: the topics whose figures the broker has refreshed since it
    loaded them (:func:`counted_topics`), so that a 0 among them is a count; None: every topic's is."""

    topics: Mapping[str, SubscriptionStats]
    broker_now: float | None = None
    counted: frozenset[str] | None = None

    def counts(self, topic: str) -> bool:
        """Whether ``topic``'s figures are the broker's count, not a just-loaded topic's zeros."""
        return topic in self.topics and (self.counted is None or topic in self.counted)

    def quiet_s(self, topic: str) -> float | None:
        """How long, on the broker's clock, nothing was delivered or acknowledged on ``topic`` (None: unknown)."""
        stats = self.topics.get(topic)
        if stats is None or stats.active_at is None or self.broker_now is None:
            return None
        return max(0.0, self.broker_now - stats.active_at)


def broker_time(date_header: str | None) -> float | None:
    """The broker's clock from its HTTP ``Date`` header (whole seconds), or None."""
    if not date_header:
        return None
    try:
        return parsedate_to_datetime(date_header).timestamp()
    except (TypeError, ValueError):
        return None


def _seconds(value: float) -> float:
    """A timestamp in seconds, whether written in seconds (pulsar-lite) or milliseconds (Pulsar)."""
    return value / 1000 if value > 1e11 else value


def parse_metrics(text: str, subscription: str) -> dict[str, SubscriptionStats]:
    """topic → stats of ``subscription``, from a Prometheus text exposition.

    Prometheus' own parser reads the text, so label escapes, ordering and spacing are its business,
    not a regex's.  Only samples labelled with this subscription count; a value that is not a finite
    number (NaN, ±Inf) says nothing and is skipped.  Partitions named by a partition label sum into
    their partition's topic (``-partition-N``; ``-1`` or none: a non-partitioned topic).  Text the
    parser rejects is a ``BrokerError``: a count read from half a page would be silently wrong."""
    found: dict[str, dict[str, float]] = {}
    try:
        for family in text_string_to_metric_families(sample_lines(text, _FIELDS, subscription)):
            for sample in family.samples:
                field = _FIELDS.get(sample.name)
                if field is None or sample.labels.get("subscription") != subscription:
                    continue
                if not math.isfinite(sample.value):
                    continue
                values = found.setdefault(topic_of(sample.labels), {})
                if field in ("consumed_at", "acked_at"):
                    values[field] = max(values.get(field, 0.0), _seconds(sample.value))
                else:
                    values[field] = values.get(field, 0.0) + sample.value
    except ValueError as e:
        raise BrokerError(f"cannot parse broker metrics: {e}") from e
    return {topic: _stats(v) for topic, v in found.items()}


def sample_lines(text: str, names: Iterable[str], subscription: str | None = None) -> str:
    """The sample lines of the families ``names`` (of ``subscription``'s samples, when given), for
    Prometheus' parser to read.  Why: a broker's page holds about a dozen families for every topic and
    subscription, and the parser (pure Python) took over a second for 600 topics, on every gauge
    refresh and every ``inflight``; the lines kept are a superset of the samples wanted (any line
    naming the subscription's value in quotes), so the parser still decides what each one says, and a
    kept line it rejects is still an error."""
    starts = tuple(f"{name}{{" for name in names) + tuple(f"{name} " for name in names)
    quoted = None if subscription is None else '"' + _escaped(subscription) + '"'
    kept = [line for line in text.splitlines() if line.startswith(starts) and (quoted is None or quoted in line)]
    return "\n".join(kept) + "\n" if kept else ""


def _escaped(value: str) -> str:
    """A label value as the text exposition writes it."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _stats(values: Mapping[str, float]) -> SubscriptionStats:
    times = [values[k] for k in ("consumed_at", "acked_at") if k in values]
    unacked = values.get("unacked")
    return SubscriptionStats(int(values.get("backlog", 0)), int(unacked) if unacked is not None else None,
                             max(times) if times else None)


def counted_topics(text: str) -> set[str]:
    """The topics whose statistics the broker has refreshed since it loaded them: those it counts a
    subscription on (pulsar-lite names a topic as soon as it is loaded, with every figure 0 until its next
    refresh; ``pulsar_subscriptions_count`` is among those refreshed)."""
    try:
        families = text_string_to_metric_families(sample_lines(text, [SUBSCRIPTIONS_METRIC]))
        return {topic_of(s.labels) for family in families for s in family.samples
                if s.name == SUBSCRIPTIONS_METRIC and math.isfinite(s.value) and s.value >= 1}
    except ValueError as e:
        raise BrokerError(f"cannot parse broker metrics: {e}") from e


def parse_rest(stats: Mapping[str, Any], subscription: str) -> SubscriptionStats:
    """One topic's stats document of the admin REST (``GET …/stats``), for ``subscription``."""
    sub = (stats.get("subscriptions") or {}).get(subscription) or {}
    times = [_seconds(float(sub[k])) for k in ("lastConsumedTimestamp", "lastAckedTimestamp")
             if isinstance(sub.get(k), int | float)]
    unacked = sub.get("unackedMessages")
    return SubscriptionStats(int(sub.get("msgBacklog", 0)), int(unacked) if isinstance(unacked, int) else None,
                             max(times) if times else None)


def topic_of(labels: Mapping[str, str]) -> str:
    """The full topic name Pulsar's metric labels spell in pieces (namespace, topic, partition)."""
    name = f"persistent://{labels.get('namespace', '')}/{labels.get('topic', '')}"
    partition = labels.get("partition", "")
    if partition not in ("", "-1"):
        name += f"-partition-{partition}"
    return name
