"""Estimated in-flight deletions: the backlog of ``ledger-deletion`` on every partition plus RETRY
(of every namespace's topics too, in namespace scope).

PIP-186's "description API".  Two sources behind one interface: a real
cluster's admin REST (``msgBacklog`` per subscription in topic stats) and the
embedded broker's Prometheus ``/metrics`` (``pulsar_subscription_back_log``,
refreshed every ~10 s, so it lags).
"""

from __future__ import annotations

import abc
import json
import math
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from deletion_service.broker.authentication import OAUTH2, BrokerCredentials
from deletion_service.broker.interface import BrokerClient, BrokerError
from deletion_service.errors import UserError
from deletion_service.protocol.topics import DeletionTopics

BACKLOG_METRIC = "pulsar_subscription_back_log"


class BacklogSource(abc.ABC):
    #: How old a backlog reading may be: what it counts may have been acknowledged since.
    staleness_s: float = 0.0

    @abc.abstractmethod
    def backlog(self, topics: Iterable[str], subscription: str) -> dict[str, int]:
        """topic → messages not yet acknowledged by ``subscription`` (0 for a topic not created yet)."""


def estimated_inflight(source: BacklogSource, scope: Sequence[DeletionTopics]) -> int:
    """The backlog of every request partition and RETRY of every set of topics in ``scope``, in one
    reading (see :mod:`deletion_service.protocol.scope` for what an unscoped reading covers)."""
    if not scope:
        return 0
    return sum(source.backlog([t for s in scope for t in s.consumed], scope[0].subscription).values())


def dlq_size(source: BacklogSource, scope: Sequence[DeletionTopics]) -> int:
    """The backlog of the DLQ subscription of every DLQ in ``scope`` (markers are acked: never counted)."""
    if not scope:
        return 0
    return sum(source.backlog([s.dlq for s in scope], scope[0].dlq_subscription).values())


class NoBacklog(BacklogSource):
    """A cluster without --web-service-url: the backlog cannot be read, and says why."""

    def backlog(self, topics: Iterable[str], subscription: str) -> dict[str, int]:
        raise BrokerError("reading the backlog on a cluster needs --web-service-url (the brokers' admin REST)")


class MetricsBacklog(BacklogSource):
    """The embedded broker's ``/metrics`` (labels: namespace, topic, partition, subscription)."""

    staleness_s = 15.0  # refreshed every ~10 s, plus the time a scrape takes to be served

    def __init__(self, metrics_url: str, timeout_s: float = 5) -> None:
        self.metrics_url = metrics_url
        self.timeout_s = timeout_s

    def backlog(self, topics: Iterable[str], subscription: str) -> dict[str, int]:
        seen = parse_backlog_metrics(self._text(), subscription)
        return {t: seen.get(t, 0) for t in topics}

    def _text(self) -> str:
        try:
            with urllib.request.urlopen(self.metrics_url, timeout=self.timeout_s) as r:
                return r.read().decode()
        except OSError as e:
            raise BrokerError(f"cannot read broker metrics at {self.metrics_url}: {e}") from e


def parse_backlog_metrics(text: str, subscription: str) -> dict[str, int]:
    """topic → backlog of ``subscription``, from a Prometheus text exposition.

    Prometheus' own parser reads the text, so label escapes, ordering and
    spacing are its business, not a regex's.  Only ``pulsar_subscription_back_log``
    samples labelled with this subscription count; a sample whose value is not a
    finite number (NaN, ±Inf) says nothing about a count and is skipped.  A
    partition label of ``-1`` (or none) names a non-partitioned topic.  Text the
    parser rejects is a ``BrokerError``: a count read from half a page would be
    silently wrong.
    """
    out: dict[str, int] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name != BACKLOG_METRIC or sample.labels.get("subscription") != subscription:
                    continue
                if not math.isfinite(sample.value):
                    continue
                name = _topic_name(sample.labels)
                out[name] = out.get(name, 0) + int(sample.value)
    except ValueError as e:
        raise BrokerError(f"cannot parse broker metrics: {e}") from e
    return out


def _topic_name(labels: dict[str, str]) -> str:
    """The full topic name Pulsar's metric labels spell in pieces (namespace, topic, partition)."""
    name = f"persistent://{labels.get('namespace', '')}/{labels.get('topic', '')}"
    partition = labels.get("partition", "")
    if partition not in ("", "-1"):
        name += f"-partition-{partition}"
    return name


class ReceivedBacklog(BacklogSource):
    """Counts the backlog by receiving every unacked message through the subscription itself, then
    closing without an ack (everything goes back to the subscription at once).

    For the one case metrics cannot answer: an embedded broker this command just started, whose
    ``/metrics`` say 0 until their first refresh (up to ~10 s, measured).  Safe only because
    nobody else consumes then: a running daemon owns the broker, so a command that had to start
    one knows no daemon runs.  Exact, where a refreshed metric is up to ~10 s old.  The count
    ends when the broker has dispatched nothing more for ``quiet_s`` (``first_s`` for the first
    message, while the consumer connects)."""

    def __init__(self, broker: BrokerClient, first_s: float = 1.0, quiet_s: float = 0.3) -> None:
        self.broker = broker
        self.first_s = first_s
        self.quiet_s = quiet_s

    def backlog(self, topics: Iterable[str], subscription: str) -> dict[str, int]:
        counts = {t: 0 for t in topics}
        for topic in counts:
            self.broker.ensure_subscription(topic, subscription)
        consumer = self.broker.consumer(list(counts), subscription)
        try:
            wait = self.first_s
            while (message := consumer.receive(wait)) is not None:
                counts[message.topic] = counts.get(message.topic, 0) + 1
                wait = self.quiet_s
        finally:
            consumer.close()
        return counts


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
        return {t: self._one(t, subscription) for t in topics}

    def _one(self, topic: str, subscription: str) -> int:
        path = topic.removeprefix("persistent://")
        url = f"{self.base}/admin/v2/persistent/{urllib.parse.quote(path)}/stats"
        req = urllib.request.Request(url, headers={"Accept": "application/json"})
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s, context=self._ssl) as r:
                stats = json.loads(r.read())
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return 0  # never written: nothing in flight there
            raise BrokerError(f"admin REST {url} answered {e.code}") from e
        except OSError as e:
            raise BrokerError(f"cannot reach admin REST at {self.base}: {e}") from e
        return int(stats.get("subscriptions", {}).get(subscription, {}).get("msgBacklog", 0))
