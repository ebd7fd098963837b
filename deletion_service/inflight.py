"""Requests in flight, and requests waiting that no consumer receives.

**In flight** (one definition; ``inflight``, the admin route and the ``estimated_inflight`` gauge all
compute it with :func:`read_in_flight`): the requests on the request partitions and RETRY of every set
of deletion topics in scope that subscription ``ledger-deletion`` has not acknowledged, *as the broker
counts them* — the sum of the subscription's backlog (PIP-186's "description API"; Pulsar's
``msgBacklog``, pulsar-lite's ``pulsar_subscription_back_log``), read fresh from the broker.  Not
what a daemon holds (``held``), not the DLQ (``dlq_size``).  pulsar-lite counts, besides the requests
not yet acknowledged, those acknowledged after the oldest one that is not: while a daemon holds one
request until it is due, every request settled after it still counts, until that one is settled.
Its statistics are refreshed every ~10 s, so a reading lags by that much.

**Waiting, received by no consumer** (:func:`undelivered`): see its docstring.

Sources behind one interface: a real cluster's admin REST (``--web-service-url``), and a broker's
Prometheus ``/metrics`` (``brokerMetricsUrl``; found by itself for the embedded broker).
"""

from __future__ import annotations

import abc
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from deletion_service.broker.authentication import OAUTH2, BrokerCredentials
from deletion_service.broker.interface import BrokerError
from deletion_service.broker.subscription_stats import (
    BACKLOG_METRIC,
    StatsReading,
    SubscriptionStats,
    broker_time,
    counted_topics,
    parse_metrics,
    parse_rest,
)
from deletion_service.errors import UserError
from deletion_service.protocol.topics import DeletionTopics

__all__ = ["BACKLOG_METRIC", "NO_SOURCE", "UNDELIVERED_AFTER_S", "UNDELIVERED_REMEDY", "AdminRestBacklog",
           "BacklogSource", "InFlight", "MetricsBacklog", "NoBacklog", "Undelivered", "dlq_size", "estimated_inflight",
           "parse_backlog_metrics", "read_in_flight", "undelivered"]

#: Nothing delivered or acknowledged on a topic for this long (on the broker's clock), while requests on it
#: are handed to a consumer and not acknowledged: they wait for a consumer that does not process them.
#: Twice the ~15 s a broker's statistics may lag, so a reading taken just before a delivery never counts.
UNDELIVERED_AFTER_S = 30.0

#: What to do about requests a consumer was handed and does not process (the alerts runbook says more).
UNDELIVERED_REMEDY = (
    "unless a running daemon holds them ('ledger-deletion status' says what each holds), they were handed to a "
    "consumer that is gone or frozen: a frozen daemon, or a killed one whose connection pulsar-lite keeps. On "
    "pulsar-lite, restart the broker (an embedded daemon's 'run' does so at start): it hands them out again; on "
    "Pulsar, end the frozen daemon, or unload the topic ('pulsar-admin topics unload TOPIC') so the broker "
    "redelivers them. Nothing is lost: they stay stored, unacknowledged")

#: What a broker that cannot be read, or was never configured, is told to do.
NO_SOURCE = ("reading the backlog on a cluster needs --web-service-url (a Pulsar broker's admin REST) or "
             "brokerMetricsUrl (a broker's Prometheus /metrics, e.g. pulsar-lite's)")


class BacklogSource(abc.ABC):
    #: How old a backlog reading may be: what it counts may have been acknowledged since.
    staleness_s: float = 0.0

    @abc.abstractmethod
    def backlog(self, topics: Iterable[str], subscription: str) -> dict[str, int]:
        """topic → messages not yet acknowledged by ``subscription`` (0 for a topic not created yet)."""

    def stats(self, topics: Iterable[str], subscription: str) -> StatsReading:
        """Every topic's stats in one reading; a source that knows only the backlog says only that."""
        return StatsReading({t: SubscriptionStats(n) for t, n in self.backlog(topics, subscription).items()})


@dataclass(frozen=True)
class InFlight:
    """One reading of the requests in flight: per topic, and the broker's stats it came from."""

    by_topic: dict[str, int]
    reading: StatsReading
    retries: frozenset[str] = frozenset()

    @property
    def total(self) -> int:
        return sum(self.by_topic.values())

    @property
    def unread(self) -> int:
        """Of them, those on the request partitions (RETRY's wait for a delay on purpose)."""
        return sum(n for t, n in self.by_topic.items() if t not in self.retries)


def read_in_flight(source: BacklogSource, scope: Sequence[DeletionTopics]) -> InFlight:
    """The requests in flight over every request partition and RETRY of every set of topics in ``scope``,
    in one reading (see :mod:`deletion_service.protocol.scope` for what an unscoped reading covers)."""
    if not scope:
        return InFlight({}, StatsReading({}))
    topics = [t for s in scope for t in s.consumed]
    reading = source.stats(topics, scope[0].subscription)
    return InFlight({t: reading.topics[t].backlog if t in reading.topics else 0 for t in topics}, reading,
                    frozenset(s.retry for s in scope))


def estimated_inflight(source: BacklogSource, scope: Sequence[DeletionTopics]) -> int:
    """PIP-186's figure: :func:`read_in_flight`'s total."""
    return read_in_flight(source, scope).total


@dataclass(frozen=True)
class Undelivered:
    """Requests handed to a consumer that does not process them, per topic, and how long each topic was quiet."""

    by_topic: dict[str, int]
    quiet_s: dict[str, float]

    @property
    def total(self) -> int:
        return sum(self.by_topic.values())


def undelivered(reading: StatsReading, held_from: Collection[str] = (),
                after_s: float = UNDELIVERED_AFTER_S) -> Undelivered:
    """Requests waiting that no consumer receives: on each topic where the broker has handed requests
    to a consumer that has not acknowledged them (``unacked`` > 0) and nothing was delivered to, or
    acknowledged by, any consumer of the subscription for ``after_s`` on the broker's clock — the
    unacknowledged requests, unless this process holds requests of that topic itself (``held_from``).

    Why this rule: a consumer that works acknowledges what it was handed within seconds, or keeps
    receiving; one that is gone or frozen does neither.  pulsar-lite keeps the consumers of a connection
    that ended with a reset (a process frozen, then killed) and never hands what it dispatched to them to
    anyone else; a frozen process holds its requests on any broker.  Either way the broker counts them
    unacknowledged and its delivery and acknowledgement times stand still — whether or not requests of
    other topics settle meanwhile, which is why ``LedgerDeletionStuck`` cannot see it.  A daemon that
    holds requests until they are due (RETRY, ``held``) or through an outage (``on_hold``) also leaves a
    topic quiet with requests unacknowledged: so a topic from which this process holds anything is not
    judged here, and the alert asks every replica (``min``): a replica that holds them says 0.  The
    broker's own clock measures the quiet (its stats' times against its answer's ``Date``), so a skewed
    clock here changes nothing; a broker that does not give the times (or the unacknowledged count) is
    never judged."""
    by_topic: dict[str, int] = {}
    quiet: dict[str, float] = {}
    for topic, stats in reading.topics.items():
        q = reading.quiet_s(topic)
        if q is None or stats.unacked is None or stats.unacked <= 0 or q < after_s or topic in held_from:
            continue
        by_topic[topic], quiet[topic] = stats.unacked, q
    return Undelivered(by_topic, quiet)


def dlq_size(source: BacklogSource, scope: Sequence[DeletionTopics]) -> int:
    """The backlog of the DLQ subscription of every DLQ in ``scope`` (markers are acked: never counted)."""
    if not scope:
        return 0
    return sum(source.backlog([s.dlq for s in scope], scope[0].dlq_subscription).values())


class NoBacklog(BacklogSource):
    """A cluster with neither --web-service-url nor brokerMetricsUrl: the backlog cannot be read, and says why."""

    def backlog(self, topics: Iterable[str], subscription: str) -> dict[str, int]:
        raise BrokerError(NO_SOURCE)


class MetricsBacklog(BacklogSource):
    """A broker's Prometheus ``/metrics`` (labels: namespace, topic, partition, subscription): the embedded
    broker's, found in its ``broker.json``, or any at ``brokerMetricsUrl`` (an external pulsar-lite)."""

    staleness_s = 15.0  # refreshed every ~10 s, plus the time a scrape takes to be served

    def __init__(self, metrics_url: str, timeout_s: float = 5) -> None:
        self.metrics_url = metrics_url
        self.timeout_s = timeout_s

    def backlog(self, topics: Iterable[str], subscription: str) -> dict[str, int]:
        reading = self.stats(topics, subscription)
        return {t: s.backlog for t, s in reading.topics.items()}

    def stats(self, topics: Iterable[str], subscription: str) -> StatsReading:
        text, now = self._text()
        seen = parse_metrics(text, subscription)
        return StatsReading({t: seen.get(t, SubscriptionStats()) for t in topics}, now,
                            frozenset(counted_topics(text)))

    def wait_counted(self, topics: Sequence[str], poll_s: float = 0.25) -> None:
        """A broker just started says 0 for every topic until it refreshes its statistics after loading them
        (~5-10 s): wait until it counts a subscription on every one of ``topics`` (the caller made sure ours
        exists), for at most ``staleness_s``."""
        deadline = time.monotonic() + self.staleness_s
        while not set(topics) <= counted_topics(self._text()[0]) and time.monotonic() < deadline:
            time.sleep(poll_s)

    def _text(self) -> tuple[str, float | None]:
        try:
            with urllib.request.urlopen(self.metrics_url, timeout=self.timeout_s) as r:
                return r.read().decode(), broker_time(r.headers.get("Date"))
        except OSError as e:
            raise BrokerError(f"cannot read broker metrics at {self.metrics_url}: {e}") from e


def parse_backlog_metrics(text: str, subscription: str) -> dict[str, int]:
    """topic → backlog of ``subscription``, from a Prometheus text exposition (see
    :func:`deletion_service.broker.subscription_stats.parse_metrics`)."""
    return {t: s.backlog for t, s in parse_metrics(text, subscription).items()}


class AdminRestBacklog(BacklogSource):
    """A real cluster's admin REST: ``GET /admin/v2/persistent/{tenant}/{ns}/{topic}/stats``.

    Authenticated as the broker client is (:mod:`deletion_service.broker.authentication`): a token as
    ``Authorization: Bearer``, TLS client certificates on the connection; over ``https://`` the broker's
    certificate is checked against ``trust_file`` unless ``allow_insecure``.  OAuth2 is not spoken here
    yet: refused at start, naming the way around (a token)."""

    def __init__(self, web_service_url: str, token_file: Path | None = None, timeout_s: float = 10,
                 credentials: BrokerCredentials | None = None, trust_file: Path | None = None,
                 allow_insecure: bool = False) -> None:
        self.base = web_service_url.rstrip("/")
        self.token = Path(token_file).read_text().strip() if token_file else None
        self.timeout_s = timeout_s
        self._ssl: ssl.SSLContext | None = None
        if credentials is not None:
            if credentials.kind == OAUTH2:
                raise UserError("the admin REST client (--web-service-url) does not speak OAuth2 yet: give it a "
                                "token (brokerAuthTokenFile) or leave --web-service-url out")
            self.token = credentials.bearer_token() or self.token
        if self.base.startswith("https://"):
            self._ssl = ssl.create_default_context(cafile=str(trust_file) if trust_file else None)
            if allow_insecure:
                self._ssl.check_hostname, self._ssl.verify_mode = False, ssl.CERT_NONE
            files = credentials.tls_files() if credentials is not None else None
            if files is not None:
                cert, key = files
                try:
                    self._ssl.load_cert_chain(cert, key)
                except (ssl.SSLError, OSError) as e:
                    raise UserError(f"the TLS client certificate {cert} with key {key} cannot be loaded: {e}") from e

    def backlog(self, topics: Iterable[str], subscription: str) -> dict[str, int]:
        return {t: s.backlog for t, s in self.stats(topics, subscription).topics.items()}

    def stats(self, topics: Iterable[str], subscription: str) -> StatsReading:
        """One stats document per topic; the broker's clock is the latest answer's ``Date``."""
        found: dict[str, SubscriptionStats] = {}
        now: float | None = None
        for topic in topics:
            found[topic], answered = self._one(topic, subscription)
            now = answered if answered is not None else now
        return StatsReading(found, now)

    def _one(self, topic: str, subscription: str) -> tuple[SubscriptionStats, float | None]:
        path = topic.removeprefix("persistent://")
        url = f"{self.base}/admin/v2/persistent/{urllib.parse.quote(path)}/stats"
        req = urllib.request.Request(url, headers={"Accept": "application/json"})
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s, context=self._ssl) as r:
                stats, now = json.loads(r.read()), broker_time(r.headers.get("Date"))
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return SubscriptionStats(), None  # never written: nothing in flight there
            raise BrokerError(f"admin REST {url} answered {e.code}") from e
        except OSError as e:
            raise BrokerError(f"cannot reach admin REST at {self.base}: {e}") from e
        return parse_rest(stats, subscription), now
