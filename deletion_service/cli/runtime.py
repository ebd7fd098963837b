"""What a command needs at run time: the effective config, and a publisher to the deletion topics."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from deletion_service.cli.context import CliContext
from deletion_service.cli.environment import connect_broker
from deletion_service.config import DeletionConfig, load_config
from deletion_service.errors import UsageError
from deletion_service.publisher import RequestPublisher
from deletion_service.topics import DeletionTopics


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
def publisher(opts: CliContext, cfg: DeletionConfig) -> Iterator[RequestPublisher]:
    """A publisher to the deletion topics on the cluster's broker (--broker-url) or the embedded
    one (reused if running; started for this command and stopped after it if not).  The topic's
    partition count is checked on connecting (``environment.check_partitions``), so what this
    publisher sends lands on partitions the daemon reads."""
    with ExitStack() as stack:
        topics = DeletionTopics.from_config(cfg)
        client, _ = connect_broker(opts, cfg, topics, own_broker=False, stack=stack)
        out = RequestPublisher(client, topics)
        stack.callback(out.close)
        yield out
