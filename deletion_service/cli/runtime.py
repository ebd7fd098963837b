"""What a command needs at run time: the effective config, the broker, the deletion service."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from deletion_service.broker.interface import BrokerClient
from deletion_service.cli.context import CliContext
from deletion_service.config import DeletionConfig, load_config
from deletion_service.errors import UsageError


def config(opts: CliContext) -> DeletionConfig:
    return load_config(opts.config, overrides=overrides(opts))


def overrides(opts: CliContext) -> dict[str, str]:
    out = {}
    for item in opts.settings:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


@contextmanager
def broker(opts: CliContext, cfg: DeletionConfig) -> Iterator[BrokerClient]:
    """The cluster's broker with --broker-url, else the embedded one (reused if running;
    started for this command and stopped after it if not)."""
    from deletion_service.cli.environment import connect_broker

    with ExitStack() as stack:
        client, _ = connect_broker(opts, cfg, own_broker=False, stack=stack)
        yield client
