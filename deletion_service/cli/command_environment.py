"""Everything a long-running command connects to, opened and checked once, closed in reverse.

Embedded mode (no --metadata-store, no --broker-url): SQLite metadata,
BookKeeper znodes and the filesystem offloader under --data-dir, and a
pulsar-lite broker the command owns.  Against a cluster: the stores and broker
named by the options, and start-up checks that fail with the fix in hand
(wrong partition count → the pulsar-admin command; unknown ledger layout).
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from deletion_service.broker.authentication import broker_credentials
from deletion_service.broker.interface import BrokerClient
from deletion_service.cli import ui
from deletion_service.cli.connections import (
    connect_broker,
    make_data_dir,
    new_data_dir_note,
    offload_settings,
    open_metadata_store,
)
from deletion_service.cli.options import CommonOptions
from deletion_service.cluster_writer import ClusterWriter
from deletion_service.config import DeletionConfig
from deletion_service.embedded.broker import BrokerInfo, EmbeddedBroker
from deletion_service.errors import UserError
from deletion_service.inflight import AdminRestBacklog, BacklogSource, MetricsBacklog, NoBacklog
from deletion_service.protocol.topics import DeletionTopics
from metastore.formats import FormatError, read_layout
from metastore.interface import MetadataStore
from offloaders.registry import OffloaderSettings


@dataclass
class CommandEnvironment:
    config: DeletionConfig
    store: MetadataStore
    bk_store: MetadataStore
    broker: BrokerClient
    backlog: BacklogSource
    offload: OffloaderSettings
    topics: DeletionTopics
    embedded_broker: BrokerInfo | None = None
    started_broker: bool = False  # this command started the embedded broker (its metrics are not warm yet)
    embedded: EmbeddedBroker | None = None
    created_data_dir: bool = False  # the embedded data dir did not exist: this command made it, empty
    _stack: ExitStack = field(default_factory=ExitStack, repr=False)

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> CommandEnvironment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_environment(opts: CommonOptions, config: DeletionConfig, own_broker: bool = False,
                     check_layout: bool = True, request_topics: bool = True,
                     read_only: bool = False) -> CommandEnvironment:
    """``own_broker``: run/demo start a fresh embedded broker (replacing a stale one of a
    killed daemon) and stop it when they end; other commands reuse a running one.
    ``request_topics`` False: the command touches only the DLQ (dlq list, purge), so the
    request topic's partition count does not concern it.  ``read_only``: the command only
    looks (dlq list, inflight), so a missing data dir or store is an error, never created
    empty — an empty one would answer "nothing here" for a mistyped --data-dir."""
    stack = ExitStack()
    try:
        created = not read_only and not Path(opts.data_dir).is_dir()  # whoever makes it below (the broker's too)
        if opts.embedded and not read_only and make_data_dir(opts.data_dir) and not own_broker:
            ui.warn(new_data_dir_note(opts.data_dir), opts.json)  # run and demo say so in their own words
        store = stack.enter_context(open_metadata_store(opts, config, must_exist=read_only))
        bk_store = store
        if opts.bookkeeper_metadata_store and opts.bookkeeper_metadata_store != opts.metadata_store:
            bk_store = stack.enter_context(open_metadata_store(opts, config, bookkeeper=True, must_exist=read_only))
        topics = DeletionTopics.from_config(config)
        broker, embedded = connect_broker(opts, config, topics, own_broker, stack, request_topics)
        info = embedded.info if embedded is not None else None
        started = embedded is not None and embedded.owned
        backlog = _backlog_source(opts, config, info)
        offload = offload_settings(opts, config)
        if opts.embedded and not read_only:
            ClusterWriter(store, bk_store, config.bookkeeper_ledgers_root_path).ensure_layout()
        if check_layout:
            _check_layout(bk_store, config)
        return CommandEnvironment(config, store, bk_store, broker, backlog, offload, topics, info, started, embedded,
                                  created, stack)
    except BaseException:
        stack.close()
        raise


def _backlog_source(opts: CommonOptions, config: DeletionConfig, info: BrokerInfo | None) -> BacklogSource:
    """Where the backlog is read: the admin REST when given, else the broker's ``/metrics`` (``brokerMetricsUrl``,
    or the embedded broker's own); neither: every reading says which to give."""
    if opts.web_service_url:
        credentials = broker_credentials(config.broker_client_authentication_plugin,
                                         config.broker_client_authentication_parameters, config.broker_auth_token_file)
        return AdminRestBacklog(opts.web_service_url, None, credentials=credentials,
                                trust_file=config.broker_tls_trust_certs_file,
                                allow_insecure=config.tls_allow_insecure_connection)
    if config.broker_metrics_url:
        return MetricsBacklog(config.broker_metrics_url)
    if info is not None:
        return MetricsBacklog(info.metricsUrl)
    return NoBacklog()


def _check_layout(bk_store: MetadataStore, config: DeletionConfig) -> None:
    try:
        read_layout(bk_store, config.bookkeeper_ledgers_root_path)
    except FormatError as e:
        raise UserError(f"BookKeeper ledger layout: {e} (check --bookkeeper-metadata-store and "
                        "bookkeeperLedgersRootPath)") from e
