"""The options every subcommand shares, gathered once by the root callback.

First in the CLI's chain of modules: options → settings (the effective config) →
connections (stores, broker) → command_environment (all of them for a long-running
command) → commands.  Each imports only those before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from deletion_service.errors import UsageError
from deletion_service.protocol.topics import DeletionTopics, namespace_topics
from metastore.formats import check_entity, parse_namespace, parse_topic

#: Common options and whether each takes a value; accepted before or after the subcommand.
COMMON_OPTIONS: dict[str, bool] = {
    "--metadata-store": True,
    "--bookkeeper-metadata-store": True,
    "--broker-url": True,
    "--web-service-url": True,
    "--data-dir": True,
    "--config": True,
    "--set": True,
    "--json": False,
    "--wide": False,
    "--debug": False,
}

DEFAULT_DATA_DIR = Path("./ledger-deletion-data")


@dataclass
class CommonOptions:
    metadata_store: str | None = None
    bookkeeper_metadata_store: str | None = None
    broker_url: str | None = None
    web_service_url: str | None = None
    data_dir: Path = DEFAULT_DATA_DIR
    config: Path | None = None
    settings: tuple[str, ...] = ()  # --set KEY=VALUE, highest precedence
    json: bool = False
    wide: bool = False  # tables as plain full-width columns on a terminal too (always so when piped)
    debug: bool = False

    @property
    def embedded(self) -> bool:
        """No external store and no broker named: everything lives under ``data_dir``."""
        return self.metadata_store is None and self.broker_url is None


def get(ctx: typer.Context) -> CommonOptions:
    obj = ctx.find_root().obj
    assert isinstance(obj, CommonOptions), "root callback did not run"
    return obj


def hoist_common_options(argv: list[str]) -> list[str]:
    """Move common options found after the subcommand to the front.

    The contract lets operators write ``ledger-deletion inflight --json`` as
    well as ``ledger-deletion --json inflight``; click only accepts group
    options before the subcommand, so we reorder instead of declaring every
    option on every command.  Everything after ``--`` is left alone.
    """
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest.extend(argv[i:])
            break
        name = arg.split("=", 1)[0]
        if name in COMMON_OPTIONS:
            front.append(arg)
            if COMMON_OPTIONS[name] and "=" not in arg and i + 1 < len(argv):
                front.append(argv[i + 1])
                i += 1
        else:
            rest.append(arg)
        i += 1
    return front + rest


def topic(name: str, flag: str = "--topic") -> str:
    """A topic option checked before anything connects, in our words and once:
    ``persistent://tenant/ns/topic`` (``tenant/ns/topic`` and a bare name in ``public/default``
    are accepted, as Pulsar does)."""
    try:
        return str(parse_topic(name))
    except ValueError as e:  # says what it expected, or not: the form is named once either way
        expected = "" if "expected" in str(e) else "; expected persistent://tenant/namespace/topic"
        raise UsageError(f"invalid {flag} {e}{expected}") from e


NamespaceOpt = Annotated[str | None, typer.Option(
    "--namespace", help="namespace scope: this namespace's own deletion topics, TENANT/NAMESPACE")]


def scoped_topics(topics: DeletionTopics, namespace: str | None) -> DeletionTopics:
    """The topics a command acts on: the configured ones, or ``--namespace``'s own."""
    if namespace is None:
        return topics
    try:
        parse_namespace(namespace)
    except ValueError as e:
        raise UsageError(f"--namespace {namespace!r}: {e}; expected TENANT/NAMESPACE") from e
    return namespace_topics(namespace, topics)


def parse_scope(tenant: str | None, namespace: str | None) -> tuple[str | None, str | None]:
    """``--tenant``/``--namespace`` checked once: names Pulsar accepts, never both."""
    if tenant and namespace:
        raise UsageError("give --tenant or --namespace, not both")
    try:
        if namespace is not None:
            parse_namespace(namespace)
        elif tenant is not None:
            check_entity("tenant", tenant)
    except ValueError as e:
        raise UsageError(f"{e}; --namespace is TENANT/NAMESPACE") from e
    return tenant, namespace
