"""``run``: the daemon — delete-phase workers, the admin HTTP API and /metrics."""

from __future__ import annotations

import gc
import logging
import signal
import threading
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated

import typer

from deletion_service import logs
from deletion_service.admin.app import create_app
from deletion_service.admin.deps import AdminDeps
from deletion_service.admin.server import AdminServer
from deletion_service.admin.token import load_admin_token
from deletion_service.audit.writer import daemon_writer
from deletion_service.cli import connections, options, settings
from deletion_service.cli.command_environment import CommandEnvironment, open_environment
from deletion_service.config import DeletionConfig
from deletion_service.cursor import epoch_metrics as cursor_metrics
from deletion_service.daemon.run import Daemon
from deletion_service.delete_phase.process.child import DeleteProcessDied, DeleteProcessSpec
from deletion_service.delete_phase.process.choice import use_delete_process
from deletion_service.embedded import daemon_record
from deletion_service.embedded.supervisor import BrokerSupervisor
from deletion_service.errors import UsageError, UserError
from deletion_service.inflight import NoBacklog
from deletion_service.leak_watcher.role import WatcherStatus
from deletion_service.protocol.scope import discover
from deletion_service.service import LedgerDeletionService
from metastore.interface import MetadataStore
from offloaders.registry import OffloaderSettings

_log = logging.getLogger("deletion_service.run")

#: How long the daemon's start waits for its delete process (importing, then connecting to the stores).
START_WAIT_S = 30.0


class LogFormat(StrEnum):
    text = "text"
    json = "json"


class LogLevel(StrEnum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


def register(app: typer.Typer) -> None:
    @app.command(help="The daemon: delete-phase workers, admin HTTP API and /metrics. Stop with SIGTERM or Ctrl-C: "
                      "the batch in hand finishes, everything else returns to the subscription.")
    def run(
        ctx: typer.Context,
        exit_when_idle: Annotated[bool, typer.Option(
            help="exit 0 once nothing is processed or waiting out a retry delay, no message arrived for 3 s, "
                 "and the backlog of every partition and RETRY is 0 (the DLQ is not waited for); a backlog "
                 "figure the embedded broker has not refreshed yet counts as 0 when this daemon acknowledged "
                 "at least that many messages since")] = False,
        max_wait: Annotated[float | None, typer.Option(
            help="with --exit-when-idle: exit 3 if not idle after this many seconds [default: no limit]")] = None,
        admin_address: Annotated[str, typer.Option(
            help="HOST:PORT of the admin API and /metrics; a non-loopback host requires an admin token")] = (
            "127.0.0.1:8090"),
        dry_run: Annotated[bool, typer.Option(
            help="verify and report, delete nothing (requests stay queued for a real run)")] = False,
        log_format: Annotated[LogFormat, typer.Option(help="text for people, json for log pipelines")] = (
            LogFormat.text),
        log_level: Annotated[LogLevel, typer.Option(help="the least severe level logged (--debug: debug)")] = (
            LogLevel.info),
        summary_every: Annotated[float, typer.Option(
            help="seconds between one-line summaries in the log (what settled, what is held, what is down); "
                 "0: none")] = 60.0,
        tenant: Annotated[str | None, typer.Option(
            help="namespace scope: serve only this tenant's namespaces (a tenant's own daemon)")] = None,
        namespace: Annotated[str | None, typer.Option(
            help="namespace scope: serve only this namespace, TENANT/NAMESPACE")] = None,
    ) -> None:
        opts = options.get(ctx)
        level = logging.DEBUG if opts.debug else getattr(logging, log_level.value.upper())
        logs.configure(level, log_format.value, quiet_libraries=not opts.debug)
        cfg = settings.load(opts).config
        with open_environment(opts, cfg, own_broker=True) as env:
            if exit_when_idle and isinstance(env.backlog, NoBacklog):
                raise UsageError("--exit-when-idle on a cluster needs --web-service-url to read the backlog")
            audit = daemon_writer(cfg, opts.data_dir, env.broker)
            process = _delete_process(opts, cfg, env.offload, dry_run, level, log_format.value)
            service = LedgerDeletionService(cfg, env.store, env.broker, env.bk_store, env.offload, dry_run=dry_run,
                                            audit=audit, delete_process=process)
            supervisor = BrokerSupervisor(env.embedded) if env.embedded is not None and env.embedded.owned else None
            served, drain = _scope(cfg, env.store, tenant, namespace)
            service.restricted_to = _restriction(tenant, namespace)
            daemon = Daemon(service, env.backlog, supervisor=supervisor, summary_every_s=summary_every,
                            namespaces=served, drain_cluster_topics=drain)
            admin = start_admin(env, service, admin_address, daemon.liveness,
                                lambda: daemon.leak_watcher.status() if daemon.leak_watcher is not None else None)
            _record_admin(opts, admin)
            previous = {sig: signal.signal(sig, lambda *_: daemon.stop_event.set())
                        for sig in (signal.SIGTERM, signal.SIGINT)}
            try:
                daemon.start()
                _wait_for_delete_process(service, daemon.stop_event)
                # What start-up built lives as long as the daemon: out of the collector's sight, a full
                # collection no longer walks it (~20% of the delete phase's CPU per request, measured)
                gc.collect()
                gc.freeze()
                if env.embedded is not None:  # so CLI calls made while we run need not subscribe
                    env.embedded.record_subscriptions(
                        [(t, env.topics.subscription) for s in service.served for t in s.consumed]
                        + [(s.dlq, env.topics.dlq_subscription) for s in service.served])
                where = env.embedded_broker.serviceUrl if env.embedded_broker else opts.broker_url
                _log.info("running against %s", _against(opts, env.created_data_dir))
                _log.info("delete phase running on %s (%d partitions + RETRY)%s; admin API on %s; %s",
                          where, env.topics.partitions, " [dry run]" if dry_run else "", admin.url,
                          _deciding(service))
                code = daemon.wait(exit_when_idle, max_wait)
            finally:
                _log.info("stopping: finishing the batch in hand")
                daemon.stop()
                daemon_record.remove(opts.data_dir)
                admin.stop()
                audit.close()
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
            _log.info("stopped")
        raise typer.Exit(code)


def _record_admin(opts: options.CommonOptions, admin: AdminServer) -> None:
    """Beside the data dir's lock, where this daemon's admin API listens: ``status`` run on the same
    data dir finds it on any port.  A data dir that cannot take the record costs only that."""
    try:
        daemon_record.write(opts.data_dir, admin.host, admin.port, admin.url)
    except OSError as e:
        _log.warning("cannot record the admin address in %s (%s): `status` needs --admin-address %s:%d",
                     opts.data_dir, e.strerror or e, admin.host, admin.port)


def _against(opts: options.CommonOptions, created_data_dir: bool) -> str:
    """What the daemon serves, for its first log line: a mistyped --data-dir or store URL shows here."""
    store = connections.store_url(opts)
    bookkeeper = connections.store_url(opts, bookkeeper=True)
    parts = [f"metadata store {store}"] + ([f"BookKeeper metadata store {bookkeeper}"] if bookkeeper != store else [])
    parts.append(f"broker {opts.broker_url}" if opts.broker_url else "the embedded broker")
    parts.append(f"data dir {opts.data_dir.absolute()}"  # the audit trail's home, embedded or not
                 + (" (created now, empty: check --data-dir if you meant an existing one)" if created_data_dir else ""))
    return ", ".join(parts)


def _delete_process(opts: options.CommonOptions, cfg: DeletionConfig, offload: OffloaderSettings, dry_run: bool,
                    level: int, log_format: str) -> DeleteProcessSpec | None:
    """The delete process's spec when ``ledgerDeletionDeleteProcess`` (auto: ZooKeeper and two CPUs) wants one."""
    urls = [connections.store_url(opts), connections.store_url(opts, bookkeeper=True)]
    if not use_delete_process(cfg.ledger_deletion_delete_process, urls):
        return None
    return DeleteProcessSpec(urls[0], urls[1], cfg.metadata_store_digest_file,
                             cfg.bookkeeper_ledgers_root_path, cfg.max_deletions_per_second, offload, dry_run,
                             level, log_format)


def _wait_for_delete_process(service: LedgerDeletionService, stop: threading.Event) -> None:
    """Until the delete process runs (it dies with the daemon, and has opened its stores): the start line
    names it only then; a SIGTERM meanwhile ends the wait (otherwise, with the process stopped
    as it started, the wait would outlast the stop bound)."""
    lane = service.worker.bookkeeper_lane if service.worker is not None else None
    if lane is None:
        return
    try:
        lane.wait_ready(START_WAIT_S, stop)
    except DeleteProcessDied as e:
        raise UserError(f"{e}; the daemon runs without one with ledgerDeletionDeleteProcess = off") from e


def _deciding(service: LedgerDeletionService) -> str:
    """Where BookKeeper requests are decided, for the start line."""
    lane = service.worker.bookkeeper_lane if service.worker is not None else None
    if lane is None:
        return "BookKeeper requests decided in this process"
    return f"BookKeeper requests decided in the delete process (pid {lane.pid})"


def _restriction(tenant: str | None, namespace: str | None) -> Callable[[str], bool] | None:
    """Which namespaces a restricted daemon may act for, also through its admin API (None: all)."""
    tenant, namespace = options.parse_scope(tenant, namespace)
    if namespace is not None:
        return lambda asked: asked == namespace
    if tenant is not None:
        return lambda asked: asked.split("/", 1)[0] == tenant
    return None


def _scope(cfg: DeletionConfig, store: MetadataStore, tenant: str | None,
           namespace: str | None) -> tuple[Callable[[], list[str]] | None, bool]:
    """Namespace scope: how to find the namespaces to serve, and whether to drain the cluster's topics
    too (an unrestricted daemon does: requests sent before the scope was switched).  Cluster scope: None."""
    tenant, namespace = options.parse_scope(tenant, namespace)
    if cfg.ledger_deletion_topic_scope != "namespace":
        if tenant is not None or namespace is not None:
            raise UsageError("--tenant/--namespace need ledgerDeletionTopicScope = namespace")
        return None, True
    return (lambda: discover(store, tenant, namespace)), tenant is None and namespace is None


def start_admin(env: CommandEnvironment, service: LedgerDeletionService, address: str,
                liveness: Callable[[], str | None] = lambda: None,
                leak_watcher: Callable[[], WatcherStatus | None] = lambda: None) -> AdminServer:
    """Refuses a non-loopback address without a token and a port in use, with one clear error."""
    token = load_admin_token(env.config.admin_token_file)
    deps = AdminDeps.for_service(service, env.backlog, token, [cursor_metrics.REGISTRY])
    deps.liveness = liveness
    deps.leak_watcher = leak_watcher
    return AdminServer(create_app(deps), address, token is not None).start()
