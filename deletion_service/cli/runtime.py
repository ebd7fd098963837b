"""What a command needs at run time: the effective config, the broker, the deletion service."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from deletion_service.broker.interface import BrokerClient
from deletion_service.cli.context import CliContext
from deletion_service.config import DeletionConfig, load_config
from deletion_service.embedded.broker import EmbeddedBroker


def config(opts: CliContext) -> DeletionConfig:
    return load_config(opts.config)


@contextmanager
def broker(opts: CliContext, cfg: DeletionConfig) -> Iterator[BrokerClient]:
    """The cluster's broker with --broker-url, else the embedded one (reused if running;
    started for this command and stopped after it if not)."""
    from deletion_service.broker.pulsar_client import PulsarBrokerClient

    embedded = None
    known = None
    if opts.broker_url:
        url = opts.broker_url
    else:
        embedded = EmbeddedBroker(opts.data_dir)
        url, known = embedded.ensure().serviceUrl, embedded.subscription_known
    client = PulsarBrokerClient(url, cfg.broker_auth_token_file, cfg.broker_tls_trust_certs_file,
                                subscription_known=known)
    try:
        yield client
    finally:
        client.close()
        if embedded is not None:
            embedded.stop()
