"""What a command connects to: the metadata stores and the broker, named by the common options.

Every opener takes the effective config its command loaded (``settings.load``), so a
command that adjusts it (``demo``) opens its connections with the adjusted copy.

The partition count of the request topic is checked where the broker is connected
(:func:`connect_broker`), so every command that sends or consumes deletion requests —
run, demo, enqueue, trim, dlq requeue, inflight — refuses the same way: a request sent
to a partition the daemon does not read waits forever, and ``inflight`` would not count
it either.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from deletion_service.broker.authentication import broker_credentials
from deletion_service.broker.interface import BrokerClient, BrokerError
from deletion_service.broker.publisher import RequestPublisher
from deletion_service.cli import ui
from deletion_service.cli.options import CommonOptions
from deletion_service.config import DeletionConfig
from deletion_service.embedded.broker import EmbeddedBroker
from deletion_service.errors import UsageError, UserError
from deletion_service.protocol.scope import known_namespaces
from deletion_service.protocol.topics import DeletionTopics
from metastore import MetadataStore, open_store
from offloaders.allow_list import AllowList
from offloaders.registry import OffloaderSettings

#: How long a broker host may take to accept a TCP connection before the client is left to try.
PROBE_TIMEOUT_S = 3.0


def embedded_store_url(data_dir: Path) -> str:
    return f"sqlite:///{Path(data_dir).absolute() / 'metadata.db'}"


def store_url(opts: CommonOptions, bookkeeper: bool = False) -> str:
    """``--bookkeeper-metadata-store`` falls back to ``--metadata-store``, then to the embedded store."""
    if bookkeeper and opts.bookkeeper_metadata_store:
        return opts.bookkeeper_metadata_store
    if opts.metadata_store:
        return opts.metadata_store
    return embedded_store_url(opts.data_dir)


def open_metadata_store(opts: CommonOptions, config: DeletionConfig, bookkeeper: bool = False,
                        must_exist: bool = False) -> MetadataStore:
    """Open the store a command needs.

    ``must_exist``: a read-only command pointed at an embedded data dir that
    was never created should say so, not create an empty database and then
    report every node as missing.
    """
    url = store_url(opts, bookkeeper)
    if must_exist and url == embedded_store_url(opts.data_dir):
        db = Path(opts.data_dir).absolute() / "metadata.db"
        if not db.exists():
            raise UserError(
                f"no embedded metadata store at {db}: pass --metadata-store zk://… for a cluster, "
                "or --data-dir for another embedded run"
            )
    return open_store(url, digest_file=config.metadata_store_digest_file, create=not must_exist)


def make_data_dir(data_dir: Path) -> bool:
    """Create the embedded mode's data dir if missing; True when it was created now (so empty)."""
    path = Path(data_dir)
    if path.is_dir():
        return False
    try:
        path.mkdir(parents=True, exist_ok=True)
    except PermissionError as e:
        raise UserError(f"cannot create data dir {path.absolute()}: permission denied; "
                        "choose another --data-dir") from e
    return True


def new_data_dir_note(data_dir: Path) -> str:
    """What to tell an operator whose command just created a data dir: a mistyped --data-dir
    otherwise looks like an embedded cluster with nothing in it."""
    return (f"created a new, empty data dir {Path(data_dir).absolute()} (no embedded cluster was there; "
            "if you meant an existing one, check --data-dir)")


def offload_settings(opts: CommonOptions, config: DeletionConfig) -> OffloaderSettings:
    """The tiered storage a command may touch: the allow-list, and the filesystem offloader's
    root (the embedded mode's ``<data-dir>/offload`` unless configured)."""
    base = config.offload_file_system_base_dir
    if base is None and opts.embedded:
        base = Path(opts.data_dir).absolute() / "offload"
    return OffloaderSettings(AllowList.from_config(config.camel()), filesystem_base_dir=base)


def connect_broker(opts: CommonOptions, config: DeletionConfig, topics: DeletionTopics, own_broker: bool,
                   stack: ExitStack, request_topics: bool = True) -> tuple[BrokerClient, EmbeddedBroker | None]:
    """The cluster's broker with --broker-url, else the data dir's embedded one (started
    if none runs; ``own_broker`` replaces a running one).  Closed and stopped with ``stack``.
    Unless ``request_topics`` is False, refuses when ``topics`` has the wrong partition count."""
    from deletion_service.broker.pulsar_client import PulsarBrokerClient  # pulsar loads only for broker commands

    embedded = None
    known = None
    if opts.broker_url:
        url = opts.broker_url
        probe_broker(url)
    else:
        if make_data_dir(opts.data_dir) and not own_broker:  # run and demo say so in their own words
            ui.warn(new_data_dir_note(opts.data_dir), opts.json)
        embedded = EmbeddedBroker(opts.data_dir)
        if request_topics:  # before starting anything: a refusal leaves a running broker alone
            check_partitions(topics, embedded)
        if own_broker:  # one daemon per data dir: a second is refused here, naming the first's pid
            embedded.claim("a ledger-deletion daemon (run or demo)")
            stack.callback(embedded.daemon_lock.release)
        stack.callback(embedded.stop)  # before starting: Ctrl-C while it starts must not leave it running
        url = (embedded.replace() if own_broker else embedded.ensure()).serviceUrl
        known = embedded.subscription_known
    credentials = broker_credentials(config.broker_client_authentication_plugin,
                                     config.broker_client_authentication_parameters, config.broker_auth_token_file)
    broker = PulsarBrokerClient(url, None, config.broker_tls_trust_certs_file, credentials=credentials,
                                tls_allow_insecure_connection=config.tls_allow_insecure_connection,
                                # a daemon on an external broker (replicas); the embedded one is a data dir's only
                                # daemon, and its broker is replaced at start: no ids to keep apart (and the
                                # soak saw a fresh broker refuse the burn's subscribe three times, 90 s)
                                subscription_known=known, long_lived=own_broker and embedded is None)
    stack.callback(broker.close)
    # namespace scope: requests go to each namespace's own (unpartitioned) topic; the cluster's are only drained
    if request_topics and embedded is None and config.ledger_deletion_topic_scope == "cluster":
        check_partitions(topics, broker, lambda message: ui.warn(message, opts.json))
    return broker, embedded


def _namespaces_known(opts: CommonOptions, config: DeletionConfig, stack: ExitStack) -> Callable[[str], bool] | None:
    """Namespace scope: which namespaces the cluster has, so an orphan of one it no longer has goes to the
    cluster's topics (no daemon serves its own).  None when an embedded data dir has no store yet."""
    if store_url(opts) == embedded_store_url(opts.data_dir) and not (Path(opts.data_dir) / "metadata.db").exists():
        return None
    return known_namespaces(stack.enter_context(open_metadata_store(opts, config)))


def probe_broker(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Fail at once, in one sentence, when no host of ``url`` accepts a TCP connection.

    The Pulsar client retries a refused connection until its operation timeout (30 s; 15 s for
    a lookup) and then says only "TimeOut".  A refusal or an unknown host is certain at once, so
    it is said at once; a host that does not answer within ``timeout_s`` (a slow or distant
    broker) is left to the client and its timeouts."""
    parsed = urlsplit(url)
    default_port = 6651 if parsed.scheme.endswith("+ssl") else 6650
    hosts = [h for h in parsed.netloc.rpartition("@")[2].split(",") if h]
    problems = []
    for host in hosts:
        name, _, port = host.rpartition(":") if host.rsplit(":", 1)[-1].isdigit() else (host, "", "")
        try:
            socket.create_connection((name.strip("[]"), int(port or default_port)), timeout=timeout_s).close()
            return
        except TimeoutError:
            return  # slow, not absent: the client's own timeouts decide
        except socket.gaierror:
            problems.append(f"unknown host {name}")
        except OSError as e:
            problems.append((f"{host}: " if len(hosts) > 1 else "") + (e.strerror or str(e)).lower())
    if problems:
        raise UserError(f"cannot connect to the broker at {url}: {'; '.join(problems)} (is the broker running, "
                        "and is --broker-url right?)")
    raise UsageError(f"--broker-url {url!r} names no host; expected pulsar://host:6650")


@contextmanager
def publisher(opts: CommonOptions, config: DeletionConfig) -> Iterator[RequestPublisher]:
    """A publisher to the deletion topics on the cluster's broker (--broker-url) or the embedded
    one (reused if running; started for this command and stopped after it if not), checked
    for the partition count the daemon reads."""
    with ExitStack() as stack:
        topics = DeletionTopics.from_config(config)
        client, _ = connect_broker(opts, config, topics, own_broker=False, stack=stack)
        namespace_scope = config.ledger_deletion_topic_scope == "namespace"
        out = RequestPublisher(client, topics, namespace_scope=namespace_scope,
                               namespace_known=_namespaces_known(opts, config, stack) if namespace_scope else None)
        stack.callback(out.close)
        yield out


def check_partitions(topics: DeletionTopics, where: BrokerClient | EmbeddedBroker,
                     warn: Callable[[str], None] = ui.warn) -> None:
    """The request topic must have exactly twoPhaseDeletionLedgerDeletionParallelism partitions.

    A cluster's broker says how many it has (partitioned-topic metadata).  pulsar-lite keeps
    none — partitions are plain topics named ``<base>-partition-N`` — so for the embedded
    broker the count is the one its data dir was first used with
    (``EmbeddedBroker.recorded_partitions``)."""
    if isinstance(where, EmbeddedBroker):
        found = where.recorded_partitions(topics.base, topics.partitions)
        if found != topics.partitions:
            raise UserError(
                f"the data dir {where.data_dir} was first used with {found} partition(s) of {topics.base}, but "
                f"twoPhaseDeletionLedgerDeletionParallelism is {topics.partitions}: requests on the other "
                f"partitions would never be read; set twoPhaseDeletionLedgerDeletionParallelism to {found}, "
                "or use a fresh --data-dir")
        return
    try:
        found = where.partitions(topics.base)
    except BrokerError as e:  # it names the topic and the broker already
        raise UserError(str(e)) from e
    if found == 0 and not where.keeps_partition_metadata():
        # An external pulsar-lite (replicas' tests, a trial): partitions are plain topics by name and
        # nothing records their count, so it cannot be checked.  Say so on every command, not silently.
        warn(f"the broker is pulsar-lite, which keeps no partitioned-topic metadata: {topics.base}'s "
             f"{topics.partitions} partitions are used as plain topics ({topics.base}-partition-0 to "
             f"-{topics.partitions - 1}) and their count is not checked; every sender and daemon must use "
             f"twoPhaseDeletionLedgerDeletionParallelism = {topics.partitions}")
        return
    if found > topics.partitions:
        raise UserError(
            f"{topics.base} has {found} partitions but twoPhaseDeletionLedgerDeletionParallelism is "
            f"{topics.partitions}; partitions cannot be removed: set the parallelism to {found}")
    if found != topics.partitions:
        verb = "create-partitioned-topic" if found == 0 else "update-partitioned-topic"
        raise UserError(
            f"{topics.base} has {found} partition(s), twoPhaseDeletionLedgerDeletionParallelism is "
            f"{topics.partitions}; fix with: pulsar-admin topics {verb} {topics.base} -p {topics.partitions}")
