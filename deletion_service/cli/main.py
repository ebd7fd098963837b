"""Entry point: assembles the command groups and turns errors into one line and an exit code."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from deletion_service import logs
from deletion_service.broker.interface import BrokerError
from deletion_service.cli import options
from deletion_service.cli.commands import config, cursor, demo, dlq, inflight, inspect, mark, run, scan_orphans
from deletion_service.errors import EXIT_FAILURE, EXIT_USAGE, UserError
from metastore import InvalidStoreUrl, MetadataStoreError

HELP = """Delete Apache Pulsar ledgers safely: the two-phase protocol of PIP-186.

Phase one (`trim`, `enqueue`, `scan-orphans --enqueue`) sends deletion requests
to a system topic; phase two (`run`, the daemon) verifies each request against
the metadata store and BookKeeper's ledger metadata, then deletes — or acks the
request as still in use or mismatched, or parks it in the DLQ with a reason.

With no --metadata-store and no --broker-url everything runs embedded under
--data-dir (SQLite metadata, a local pulsar-lite broker, filesystem offload).
Common options may be given before or after the subcommand.
"""

app = typer.Typer(
    name="ledger-deletion", help=HELP, no_args_is_help=True, add_completion=False,
    pretty_exceptions_enable=False, rich_markup_mode="markdown",
)


@app.callback()
def root(
    ctx: typer.Context,
    metadata_store: Annotated[str | None, typer.Option(
        help="zk://host:port[,host:port][/chroot] or sqlite:///path; default: embedded SQLite in --data-dir",
        envvar="LEDGER_DELETION_METADATA_STORE")] = None,
    bookkeeper_metadata_store: Annotated[str | None, typer.Option(
        help="where BookKeeper's ledger metadata lives; default: the --metadata-store",
        envvar="LEDGER_DELETION_BOOKKEEPER_METADATA_STORE")] = None,
    broker_url: Annotated[str | None, typer.Option(
        help="pulsar://host:6650; default: the embedded broker", envvar="LEDGER_DELETION_BROKER_URL")] = None,
    web_service_url: Annotated[str | None, typer.Option(
        help="http://broker:8080, for backlog stats on a real cluster",
        envvar="LEDGER_DELETION_WEB_SERVICE_URL")] = None,
    data_dir: Annotated[Path, typer.Option(help="where the embedded mode keeps its state")] = (
        options.DEFAULT_DATA_DIR),
    config: Annotated[Path | None, typer.Option(help="TOML config file (camelCase keys as in Pulsar)")] = None,
    settings: Annotated[list[str] | None, typer.Option(
        "--set", metavar="KEY=VALUE",
        help="override one config key, e.g. --set twoPhaseDeletionMaxRetryDeleteCount=3 (repeatable; "
             "beats env and file)")] = None,
    json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="show tracebacks and debug logs")] = False,
) -> None:
    ctx.obj = options.CommonOptions(
        metadata_store=metadata_store, bookkeeper_metadata_store=bookkeeper_metadata_store,
        broker_url=broker_url, web_service_url=web_service_url, data_dir=data_dir, config=config,
        settings=tuple(settings or ()),
        json=json, debug=debug,
    )


#: In the order ``--help`` lists them.
COMMANDS = (run, demo, mark, inflight, dlq, config, scan_orphans, inspect, cursor)
for command in COMMANDS:
    command.register(app)


def main(argv: list[str] | None = None) -> int:
    args = options.hoist_common_options(list(sys.argv[1:] if argv is None else argv))
    debug = "--debug" in args
    _configure_logging(debug)
    try:
        # Standalone mode: click prints usage errors itself and exits 2.
        app(args=args, prog_name="ledger-deletion", standalone_mode=True)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_FAILURE)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - the one place that turns errors into a line
        if debug:
            raise
        code, message = describe(e)
        print(f"error: {message}", file=sys.stderr)
        return code
    return 0


def _configure_logging(debug: bool) -> None:
    """Library chatter (kazoo's reconnect loop, pulsar-client's connections) stays out of
    an operator's terminal; our own errors are reported as one line instead.  ``run``
    reconfigures for a daemon (INFO, text or JSON)."""
    logs.configure(logging.DEBUG if debug else logging.WARNING, quiet_libraries=not debug)


def describe(e: BaseException) -> tuple[int, str]:
    """The exit code and one line for an error; unknown errors ask for --debug."""
    if isinstance(e, UserError):
        return e.exit_code, str(e)
    if isinstance(e, InvalidStoreUrl):
        return EXIT_USAGE, str(e)
    if isinstance(e, MetadataStoreError | BrokerError):
        return EXIT_FAILURE, str(e)
    if isinstance(e, PermissionError):
        return EXIT_FAILURE, f"permission denied: {e.filename or e}: fix the permissions or choose another --data-dir"
    if isinstance(e, OSError) and e.filename:
        return EXIT_FAILURE, f"{e.strerror}: {e.filename}"
    return EXIT_FAILURE, f"unexpected {type(e).__name__}: {e} (rerun with --debug for the traceback)"


def entry() -> None:
    """The console script: exit without running interpreter teardown.

    pulsar-client's C++ threads sometimes outlive ``Client.close()``; when the
    interpreter then destroys them, the process aborts ("terminate called
    without an active exception") after the command already succeeded.  All
    our cleanup runs in ``finally`` blocks inside ``main``, so skipping
    teardown loses nothing.
    """
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)


if __name__ == "__main__":
    entry()
