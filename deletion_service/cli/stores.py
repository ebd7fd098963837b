"""Which metadata store a command talks to, resolved once from the common options."""

from __future__ import annotations

from pathlib import Path

from deletion_service.cli.context import CliContext
from deletion_service.errors import UserError
from metastore import MetadataStore, open_store


def embedded_store_url(data_dir: Path) -> str:
    return f"sqlite:///{Path(data_dir).absolute() / 'metadata.db'}"


def store_url(opts: CliContext, bookkeeper: bool = False) -> str:
    """``--bookkeeper-metadata-store`` falls back to ``--metadata-store``, then to the embedded store."""
    if bookkeeper and opts.bookkeeper_metadata_store:
        return opts.bookkeeper_metadata_store
    if opts.metadata_store:
        return opts.metadata_store
    return embedded_store_url(opts.data_dir)


def open_for(opts: CliContext, bookkeeper: bool = False, must_exist: bool = False) -> MetadataStore:
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
    from deletion_service.cli import runtime  # the effective config: --set, env, file

    return open_store(url, digest_file=runtime.config(opts).metadata_store_digest_file)
