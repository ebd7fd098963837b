"""``demo``: for now a smoke run of the embedded stack (store + broker round trip).

The full demo (generated cluster state, trim, enqueue, delete, live progress)
is issue 6; until then this proves the embedded defaults work on this machine.
"""

from __future__ import annotations

import json
import logging
import time
import uuid

import typer
from rich.console import Console
from rich.table import Table

from deletion_service.cli import context
from deletion_service.embedded.broker import EmbeddedBroker
from deletion_service.errors import UserError
from metastore import ANY, open_store


def register(app: typer.Typer) -> None:
    @app.command(help="A run of the embedded stack on this machine (full demo: issue 6).")
    def demo(ctx: typer.Context) -> None:
        opts = context.get(ctx)
        started = time.monotonic()
        data_dir = opts.data_dir.absolute()
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
        except PermissionError as e:
            raise UserError(f"cannot create data dir {data_dir}: permission denied; choose another --data-dir") from e
        rows: list[tuple[str, str]] = []
        with open_store(f"sqlite:///{data_dir / 'metadata.db'}") as store:
            version = store.put("/ledger-deletion/demo/last-run", str(time.time()).encode(), ANY)
            rows.append(("metadata store", f"sqlite {data_dir / 'metadata.db'} (write #{version + 1})"))
        broker = EmbeddedBroker(data_dir)
        info = broker.ensure()
        try:
            rows.append(("broker", f"pulsar-lite pid {info.pid} at {info.serviceUrl}"))
            rows.append(("round trip", _round_trip(info.serviceUrl)))
        finally:
            broker.stop()
        rows.append(("elapsed", f"{time.monotonic() - started:.1f}s"))
        if opts.json:
            typer.echo(json.dumps(dict(rows)))
            return
        table = Table(title="ledger-deletion: embedded stack", show_header=False)
        for k, v in rows:
            table.add_row(k, v)
        console = Console()
        console.print(table)
        console.print("[yellow]The full demo (trim → enqueue → delete with progress) is not built yet: issue 6.")


def _round_trip(service_url: str) -> str:
    import pulsar

    topic = f"persistent://public/default/ledger-deletion-smoke-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(service_url, operation_timeout_seconds=10, logger=_quiet_logger())
    try:
        consumer = client.subscribe(topic, "smoke", initial_position=pulsar.InitialPosition.Earliest)
        client.create_producer(topic, batching_enabled=False).send(b"ping")
        msg = consumer.receive(timeout_millis=10_000)
        consumer.acknowledge(msg)
        return f"sent and received 1 message on {topic}"
    except Exception as e:  # noqa: BLE001 - reported as the broker's failure, in one line
        raise UserError(f"embedded broker at {service_url} did not round-trip a message: {e}") from e
    finally:
        client.close()


def _quiet_logger() -> logging.Logger:
    """pulsar-client logs every connection at INFO; an operator's terminal wants warnings only."""
    logger = logging.getLogger("pulsar-client")
    logger.setLevel(logging.WARNING)
    return logger
