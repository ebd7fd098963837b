"""Every command's ``--help`` ends with examples, and never cuts what it shows.

**Examples.**  An operator learns a command from one line that works faster than from its option
table.  Each command's examples live here, keyed by the command's path, and
:func:`finish_help` appends them to its help as an "Examples" section when the root group loads
the command (``main.LazyGroup``), so ``--help`` and the generated CLI reference
(``scripts/gen_docs.py`` reads the same help) show them.  A command without examples is a test
failure (``tests/unit/cli/test_help_examples.py``).

**Nothing cut at 80 columns.**  rich's option table gives each name form a column of its own; a
boolean flag's ``--no-…`` form (``--no-exit-when-idle``) took one and cut it, and the default it
forced into the help column was cut too (``[default: no-exit-when-idl…``).  A flag that is off by
default needs no ``--no-`` form and no default shown, so :func:`finish_help` drops both (a
tri-state flag, default None, keeps its two forms).  The root's list of commands shows each
command's first sentence (its whole first paragraph, an admin route among it, was cut there).
"""

from __future__ import annotations

import click
from typer.core import TyperGroup

#: Command path (after ``ledger-deletion``; "" for the root) → (command line, what it does).
EXAMPLES: dict[str, tuple[tuple[str, str], ...]] = {
    "": (
        ("ledger-deletion demo", "a full embedded run on generated data, in under a minute"),
        ("ledger-deletion --metadata-store zk://zk1:2181/pulsar --broker-url pulsar://broker:6650 run",
         "the daemon on a cluster"),
        ("ledger-deletion status", "what the daemon of ./ledger-deletion-data is doing"),
    ),
    "run": (
        ("ledger-deletion run", "the embedded daemon on ./ledger-deletion-data, admin API on 127.0.0.1:8090"),
        ("ledger-deletion --metadata-store zk://zk1:2181/pulsar --broker-url pulsar://broker:6650 "
         "--web-service-url http://broker:8080 run --admin-address 0.0.0.0:8090",
         "on a cluster (needs an admin token)"),
        ("ledger-deletion run --exit-when-idle --max-wait 600",
         "drain what is queued, then exit (3 if not idle in time)"),
    ),
    "demo": (
        ("ledger-deletion demo", "build a small embedded cluster under ./ledger-deletion-data and delete its garbage"),
        ("ledger-deletion demo --data-dir /tmp/ld --json", "the same elsewhere, the summary as JSON"),
    ),
    "enqueue": (
        ("ledger-deletion enqueue -t persistent://acme/orders/events --ledger-id 1234",
         "ask the daemon to verify and delete ledger 1234 of that topic"),
        ("ledger-deletion enqueue -t persistent://acme/orders/gone --ledger-id 77 --allow-missing-topic",
         "a deleted topic's leftover ledger"),
        ("ledger-deletion enqueue --from-file requests.jsonl --dry-run", "show what a file of requests would send"),
    ),
    "trim": (
        ("ledger-deletion trim -t persistent://acme/orders/events --dry-run",
         "which ledgers the mark phase would pick"),
        ("ledger-deletion trim -t persistent://acme/orders/events --offline", "trim a topic no broker serves"),
    ),
    "inflight": (
        ("ledger-deletion inflight", "deletions waiting, per partition and RETRY"),
        ("ledger-deletion inflight --namespace acme/orders --json", "one namespace's (namespace scope), as JSON"),
    ),
    "dlq": (
        ("ledger-deletion dlq list", "the parked requests and why"),
        ("ledger-deletion dlq requeue --reason max-retries-reached", "send those back to the daemon"),
    ),
    "dlq list": (
        ("ledger-deletion dlq list", "every parked request, oldest first"),
        ("ledger-deletion dlq list --reason invalid-request --json", "those parked for one reason, as JSON"),
    ),
    "dlq requeue": (
        ("ledger-deletion dlq requeue --reason max-retries-reached", "retry those that ran out of retries"),
        ("ledger-deletion dlq requeue --older-than 6h", "those parked more than six hours ago"),
    ),
    "dlq purge": (
        ("ledger-deletion dlq purge --reason invalid-request", "drop the undecodable ones (asks first)"),
        ("ledger-deletion dlq purge --all --yes", "drop everything parked now, from a script"),
    ),
    "config": (
        ("ledger-deletion config show", "the effective configuration and where each value came from"),
    ),
    "config show": (
        ("ledger-deletion --config ld.toml config show", "what a config file gives, secrets masked"),
        ("ledger-deletion config show --set minLedgerAgeSeconds=60 --json", "with an override, as JSON"),
    ),
    "scan-orphans": (
        ("ledger-deletion scan-orphans --output /tmp/scan", "report orphans: Parquet tables and report.html"),
        ("ledger-deletion scan-orphans --min-age 2d --enqueue", "send orphans older than two days to the daemon"),
    ),
    "inspect": (
        ("ledger-deletion inspect managed-ledger -t persistent://acme/orders/events", "a topic's ledger list"),
        ("ledger-deletion inspect bk-path 1234", "where BookKeeper keeps ledger 1234's metadata"),
    ),
    "inspect managed-ledger": (
        ("ledger-deletion inspect managed-ledger -t persistent://acme/orders/events", "a topic's ledger list"),
        ("ledger-deletion inspect managed-ledger --file node.bin --json", "a node saved to a file, as JSON"),
    ),
    "inspect cursor": (
        ("ledger-deletion inspect cursor --path /managed-ledgers/acme/orders/persistent/events/sub1",
         "a subscription's cursor node"),
    ),
    "inspect bk-ledger": (
        ("ledger-deletion inspect bk-ledger --path /ledgers/00/0000/L1234", "a ledger's BookKeeper metadata"),
    ),
    "inspect bk-path": (
        ("ledger-deletion inspect bk-path 1234", "the znode of ledger 1234 (hierarchical layout)"),
        ("ledger-deletion inspect bk-path 1234 --layout long", "in the long layout"),
    ),
    "cursor": (
        ("ledger-deletion cursor health", "cursors near or over their ack-state budget"),
    ),
    "cursor health": (
        ("ledger-deletion cursor health --namespace acme/orders", "one namespace's cursors"),
        ("ledger-deletion cursor health --all --json", "every cursor, healthy ones too, as JSON"),
    ),
    "cursor reset": (
        ("ledger-deletion cursor reset -t persistent://acme/orders/events -s sub1 -p 1234:0 --dry-run",
         "what moving sub1 to 1234:0 would do"),
        ("ledger-deletion cursor reset -t persistent://acme/orders/events -s sub1 -p earliest",
         "replay sub1 from the first listed ledger"),
    ),
    "status": (
        ("ledger-deletion status", "the daemon of ./ledger-deletion-data, wherever its admin API listens"),
        ("ledger-deletion status --admin-address 10.0.0.5:8090 --json", "a daemon elsewhere, as JSON"),
    ),
    "audit": (
        ("ledger-deletion audit --ledger 1234", "what became of ledger 1234, and the evidence"),
        ("ledger-deletion audit --since 1d --outcome dlq", "what was parked in the last day"),
        ("ledger-deletion audit verify", "check the trail's hash chain"),
    ),
    "audit verify": (
        ("ledger-deletion audit verify", "exit 0 when the chain is whole, 1 naming the first bad record"),
        ("ledger-deletion audit verify --files-only", "the files alone, not the -AUDIT topic copy"),
    ),
}


def examples_text(path: str) -> str:
    """The "Examples" section for the command at ``path``: each line to type, then what it does."""
    lines = []
    for command, what in EXAMPLES[path]:
        lines.append(f"* `{command}`  \n  {what}")
    return "**Examples**\n\n" + "\n".join(lines)


def finish_help(command: click.Command, path: str) -> None:
    """Append ``command``'s examples to its help (and its subcommands'), and drop the ``--no-`` form and
    the shown default of its off-by-default flags (see the module docstring)."""
    if command.short_help is None and command.help:  # the root's list: one sentence a command, whole
        command.short_help = _first_sentence(command.help)
    if path in EXAMPLES and "**Examples**" not in (command.help or ""):
        command.help = (command.help or "").rstrip() + "\n\n" + examples_text(path)
    for param in command.params:
        if isinstance(param, click.Option) and param.is_flag and param.default is False and param.secondary_opts:
            param.secondary_opts = []
            param.show_default = False
    if isinstance(command, TyperGroup):
        for name, sub in command.commands.items():
            finish_help(sub, f"{path} {name}".strip())


def _first_sentence(text: str) -> str:
    paragraph = " ".join(text.strip().split("\n\n", 1)[0].split())
    head, dot, _ = paragraph.partition(". ")
    return head + "." if dot else paragraph
