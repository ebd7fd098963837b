"""Entry point: assembles the command groups and turns errors into one line and an exit code."""

from __future__ import annotations

import copy
import difflib
import importlib
import json as json_module
import logging
import os
import signal
import sys
from importlib import metadata
from pathlib import Path
from typing import Annotated

import click
import typer
from typer.core import TyperGroup, TyperOption

from deletion_service import logs
from deletion_service.broker.interface import BrokerError
from deletion_service.cli import examples, options
from deletion_service.errors import EXIT_FAILURE, EXIT_USAGE, UserError
from metastore import InvalidStoreUrl, MetadataStoreError

#: Like a shell's exit status after SIGINT.
EXIT_INTERRUPTED = 130

HELP = """Delete Apache Pulsar ledgers safely: the two-phase protocol of PIP-186.

Phase one (`trim`, `enqueue`, `scan-orphans --enqueue`) sends deletion requests
to a system topic; phase two (`run`, the daemon) verifies each request against
the metadata store and BookKeeper's ledger metadata, then deletes — or acks the
request as still in use or mismatched, or parks it in the DLQ with a reason.

With no --metadata-store and no --broker-url everything runs embedded under
--data-dir (SQLite metadata, a local pulsar-lite broker, filesystem offload).
Common options may be given before or after the subcommand.

Store URLs: `zk://host:port[,host:port][/chroot]` or `sqlite:///path/metadata.db`,
and Pulsar's own forms: `zk:host:port[,host:port][/chroot]` (metadataStoreUrl),
a bare `host:port[,host:port]`, `metadata-store:zk:host:port/ledgers`
(bookkeeperMetadataServiceUri).
Broker: `pulsar://host:6650`; admin REST: `http://host:8080`.

Environment (below flags, above --config): `LEDGER_DELETION_METADATA_STORE`,
`LEDGER_DELETION_BOOKKEEPER_METADATA_STORE`, `LEDGER_DELETION_BROKER_URL`,
`LEDGER_DELETION_WEB_SERVICE_URL`, `LEDGER_DELETION_DATA_DIR`, and every
config key as `LEDGER_DELETION_<UPPER_SNAKE>` (see `config show`).
"""

#: Rich help panel of the common options, repeated in every subcommand's --help.
COMMON_PANEL = "Common options (before or after the subcommand)"

#: Command name → the module under ``deletion_service.cli.commands`` that registers it, in
#: the order ``--help`` lists them.  A command's module is imported only when that command
#: runs (or for ``--help``): ``dlq list`` must not pay for FastAPI, the demo or Spark.
LAZY_COMMANDS = {
    "run": "run", "demo": "demo", "enqueue": "mark", "trim": "mark", "inflight": "inflight", "dlq": "dlq",
    "config": "config", "scan-orphans": "scan_orphans", "inspect": "inspect", "cursor": "cursor",
    "status": "status", "audit": "audit",
}


class LazyGroup(TyperGroup):
    """The root group: loads a subcommand's module on first use (click's lazy-group pattern),
    and shows the root's common options in every subcommand's ``--help``, since
    :func:`options.hoist_common_options` lets operators write them after the subcommand."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(LAZY_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in LAZY_COMMANDS:
            module = importlib.import_module(f"deletion_service.cli.commands.{LAZY_COMMANDS[cmd_name]}")
            holder = typer.Typer(rich_markup_mode="markdown", add_completion=False, pretty_exceptions_enable=False)
            module.register(holder)
            for name, command in typer.main.get_group(holder).commands.items():
                _show_common_options(command, self.params)
                examples.finish_help(command, name)
                self.commands[name] = command
        return self.commands.get(cmd_name)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None,
                                                                            list[str]]:
        """typer names the closest command among those loaded; here that is every command."""
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as e:
            matches = difflib.get_close_matches(args[0], list(LAZY_COMMANDS)) if args else []
            if not matches or "Did you mean" in e.format_message():
                raise
            named = ", ".join(repr(m) for m in matches)
            raise click.UsageError(f"{e.format_message().rstrip('.')}. Did you mean {named}?", e.ctx) from None


def _show_common_options(command: click.Command, common: list[click.Parameter]) -> None:
    """Append copies of the common options to ``command`` (and its subcommands) for --help only:
    hoisting moves them in front of the subcommand before click parses, so these copies never
    receive a value (``expose_value=False``; no env var read twice)."""
    if isinstance(command, TyperGroup):
        for sub in command.commands.values():
            _show_common_options(sub, common)
        return
    for param in common:
        if isinstance(param, TyperOption) and not param.is_eager:
            shown = copy.copy(param)
            shown.expose_value = False
            shown.envvar = None
            shown.default = None
            shown.show_default = False
            shown.rich_help_panel = COMMON_PANEL  # type: ignore[attr-defined]
            command.params.append(shown)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"ledger-deletion {_version()}")
        raise typer.Exit()


def _version() -> str:
    try:
        return metadata.version("ledger-deletion")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


app = typer.Typer(
    name="ledger-deletion", help=HELP + "\n" + examples.examples_text(""), no_args_is_help=True,
    add_completion=False, cls=LazyGroup, pretty_exceptions_enable=False, rich_markup_mode="markdown",
)


@app.callback()
def root(
    ctx: typer.Context,
    metadata_store: Annotated[str | None, typer.Option(
        metavar="URL", help="a ZooKeeper or SQLite URL (forms: ledger-deletion --help); default: SQLite in --data-dir",
        envvar="LEDGER_DELETION_METADATA_STORE", show_envvar=False)] = None,
    bookkeeper_metadata_store: Annotated[str | None, typer.Option(
        metavar="URL", help="where BookKeeper's ledger metadata lives; default: --metadata-store",
        envvar="LEDGER_DELETION_BOOKKEEPER_METADATA_STORE", show_envvar=False)] = None,
    broker_url: Annotated[str | None, typer.Option(
        metavar="URL", help="the broker's service URL; default: the embedded broker",
        envvar="LEDGER_DELETION_BROKER_URL", show_envvar=False)] = None,
    web_service_url: Annotated[str | None, typer.Option(
        metavar="URL", help="the brokers' admin REST, for backlog stats on a cluster",
        envvar="LEDGER_DELETION_WEB_SERVICE_URL", show_envvar=False)] = None,
    data_dir: Annotated[Path, typer.Option(
        metavar="DIR", help="where the embedded mode keeps its state", envvar="LEDGER_DELETION_DATA_DIR",
        show_envvar=False)] = options.DEFAULT_DATA_DIR,
    config: Annotated[Path | None, typer.Option(
        metavar="FILE", help="TOML config file (camelCase keys as in Pulsar)")] = None,
    settings: Annotated[list[str] | None, typer.Option(
        "--set", metavar="KEY=VALUE",
        help="override one config key, e.g. --set minLedgerAgeSeconds=60 (repeatable; beats env and file)")] = None,
    json: Annotated[bool, typer.Option(
        "--json", help="machine-readable output; an error is one JSON object on stderr")] = False,
    wide: Annotated[bool, typer.Option(
        "--wide", help="tables as plain full-width columns on a terminal too (always so when piped)")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="show tracebacks and debug logs")] = False,
    version: Annotated[bool, typer.Option(
        "--version", help="print the version and exit", is_eager=True, callback=_print_version)] = False,
) -> None:
    ctx.obj = options.CommonOptions(
        metadata_store=metadata_store, bookkeeper_metadata_store=bookkeeper_metadata_store,
        broker_url=broker_url, web_service_url=web_service_url, data_dir=data_dir, config=config,
        settings=tuple(settings or ()),
        json=json, wide=wide, debug=debug,
    )


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGINT, signal.default_int_handler)  # loaded: Ctrl-C may now unwind (see cli/__init__)
    args = options.hoist_common_options(list(sys.argv[1:] if argv is None else argv))
    debug = "--debug" in args
    as_json = "--json" in args[:args.index("--")] if "--" in args else "--json" in args
    _configure_logging(debug)
    try:
        if as_json:
            return _run_for_json(args)
        # Standalone mode: click prints usage errors itself and exits 2.
        app(args=args, prog_name="ledger-deletion", standalone_mode=True)
    except SystemExit as e:
        if e.code == EXIT_INTERRUPTED:  # typer turns Ctrl-C into a silent exit 130
            print("interrupted", file=sys.stderr)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_FAILURE)
    except KeyboardInterrupt:
        report_error("interrupted", EXIT_INTERRUPTED, as_json, prefix="")
        return EXIT_INTERRUPTED
    except Exception as e:  # noqa: BLE001 - the one place that turns errors into a line
        if debug:
            raise
        code, message = describe(e)
        report_error(message, code, as_json)
        return code
    return 0


def _run_for_json(args: list[str]) -> int:
    """The command with ``--json``: click's own usage errors too become one JSON object
    (standalone mode would print click's usage text), with the exit code click gives them."""
    try:
        code = app(args=args, prog_name="ledger-deletion", standalone_mode=False)
    except click.ClickException as e:  # (typer's suggestion is in the message already; click would add it again)
        report_error(e.message if "Did you mean" in e.message else e.format_message(), e.exit_code, as_json=True)
        return e.exit_code
    except click.exceptions.Abort as e:  # Ctrl-C, or a confirmation declined
        interrupted = isinstance(e.__cause__, KeyboardInterrupt)
        code = EXIT_INTERRUPTED if interrupted else EXIT_FAILURE
        report_error("interrupted" if interrupted else "aborted", code, as_json=True)
        return code
    return code if isinstance(code, int) else 0


def report_error(message: str, code: int, as_json: bool, prefix: str = "error: ") -> None:
    """An error as one line on stderr: ``error: …``, or with ``--json`` one JSON object
    ``{"error": "…", "exitCode": N}`` (stdout keeps only results, so a script's parser never
    meets an error there; the exit code is the same either way)."""
    if as_json:
        print(json_module.dumps({"error": message, "exitCode": code}, ensure_ascii=False), file=sys.stderr)
    else:
        print(f"{prefix}{message}", file=sys.stderr)


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
