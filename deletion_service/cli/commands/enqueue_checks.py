"""What ``enqueue --topic/--ledger-id`` is about to ask for, checked against the metadata store.

A request for a ledger that exists nowhere is harmless (the daemon acks it as absent) but it is
almost always a typo, and "sent 1" then reads as success.  So before sending, the one request is
looked up:

* the topic's managed ledger: a topic the metadata store does not have is refused, naming the
  closest topic of its namespace (``-t bad`` resolves, as Pulsar does, to
  ``persistent://public/default/bad``, and went out with two warnings nobody reads), unless
  ``--allow-missing-topic`` says the topic is gone on purpose (a deleted topic's leftover ledger:
  then a warning);
* the ledger's BookKeeper metadata: missing means nothing will be deleted, a warning naming the
  topic's own ledgers.

Requests from ``--from-file`` (a scan's output, thousands of them) are not looked up one by one.
"""

from __future__ import annotations

from pathlib import Path

from deletion_service.cli import connections, known_names, ui
from deletion_service.cli.options import CommonOptions
from deletion_service.config import DeletionConfig
from deletion_service.errors import UserError
from deletion_service.protocol.request import PendingDeleteLedgerInfo
from metastore.formats import FormatError, decode_managed_ledger, ledger_path, managed_ledger_path, read_layout
from metastore.interface import MetadataStore, MetadataStoreError


def warnings(opts: CommonOptions, config: DeletionConfig, request: PendingDeleteLedgerInfo,
             dry_run: bool, allow_missing_topic: bool = False) -> list[str]:
    """One sentence per doubt about ``request``; none when the topic and the ledger both exist.
    Raises :class:`UserError` for a topic the store does not have, unless ``allow_missing_topic``."""
    if not opts.embedded and opts.metadata_store is None:
        return []  # a cluster's broker, and no store named to look in
    db = Path(opts.data_dir).absolute() / "metadata.db"
    if connections.store_url(opts) == connections.embedded_store_url(opts.data_dir) and not db.exists():
        # a send says "created a new data dir" itself; a dry run creates nothing
        return [f"no embedded metadata store under {Path(opts.data_dir).absolute()} (a mistyped --data-dir?): "
                "nothing exists there to delete"] if dry_run else []
    try:
        return _look_up(opts, config, request, allow_missing_topic)
    except MetadataStoreError as e:
        return [f"cannot check that the topic and the ledger exist: {e}"]


def _look_up(opts: CommonOptions, config: DeletionConfig, request: PendingDeleteLedgerInfo,
             allow_missing_topic: bool) -> list[str]:
    found = []
    with connections.open_metadata_store(opts, config) as store:
        topic_note = known_names.missing_topic(store, request.topic_name)
        if topic_note is not None and not allow_missing_topic:
            raise UserError(f"{topic_note}; nothing was sent (for a deleted topic's leftover ledger, add "
                            "--allow-missing-topic)")
        if topic_note is not None:
            found.append(topic_note + " (sent anyway: --allow-missing-topic)")
        with connections.open_metadata_store(opts, config, bookkeeper=True) as bk_store:
            ledger_note = _missing_ledger(bk_store, config, request.ledger_id)
        if ledger_note is not None:
            listed = _listed_ledgers(store, request.topic_name)
            found.append(ledger_note + (f"; {request.topic_name} lists ledger(s) {ui.ids(listed)}" if listed else ""))
    return found


def _missing_ledger(bk_store: MetadataStore, config: DeletionConfig, ledger_id: int) -> str | None:
    root = config.bookkeeper_ledgers_root_path
    try:
        path = ledger_path(root, ledger_id, read_layout(bk_store, root))
    except (FormatError, ValueError) as e:
        return f"cannot check that ledger {ledger_id} exists: {e}"
    if bk_store.exists(path):
        return None
    return (f"ledger {ledger_id} has no BookKeeper metadata at {path}: there is nothing to delete (the daemon "
            "will ack the request as absent)")


def _listed_ledgers(store: MetadataStore, topic: str) -> list[int]:
    node = store.get(managed_ledger_path(topic))
    if node is None:
        return []
    try:
        return [ledger.ledger_id for ledger in decode_managed_ledger(node.data).ledgers]
    except FormatError:
        return []
