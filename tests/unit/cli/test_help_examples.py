"""Every command's help carries examples, and each example names options the command has."""

from __future__ import annotations

import shlex

import click

from deletion_service.cli import examples
from deletion_service.cli.main import LAZY_COMMANDS, app
from deletion_service.cli.options import COMMON_OPTIONS


def _commands() -> dict[str, click.Command]:
    import typer

    root = typer.main.get_command(app)
    ctx = click.Context(root, info_name="ledger-deletion")
    found: dict[str, click.Command] = {"": root}

    def walk(command: click.Command, path: str) -> None:
        found[path] = command
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None, name
                walk(sub, f"{path} {name}".strip())

    for name in LAZY_COMMANDS:
        sub = root.get_command(ctx, name)  # type: ignore[union-attr]
        assert sub is not None, name
        walk(sub, name)
    return found


def test_every_command_has_examples_in_its_help() -> None:
    commands = _commands()
    assert set(commands) == set(examples.EXAMPLES), set(commands) ^ set(examples.EXAMPLES)
    for path, command in commands.items():
        assert "**Examples**" in (command.help or ""), path


def test_every_example_uses_only_options_its_command_or_the_root_has() -> None:
    commands = _commands()
    for path, listed in examples.EXAMPLES.items():
        for line, what in listed:
            words = shlex.split(line)
            assert words[0] == "ledger-deletion" and what, line
            runs = _names(words)
            command = commands[" ".join(runs)]
            known = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)} | set(COMMON_OPTIONS)
            unknown = [w for w in words[1:] if w.startswith("-") and w.split("=")[0] not in known]
            assert unknown == [], (path, line, unknown)
            assert path == "" or " ".join(runs).startswith(path), (path, line)  # the command, or one of its group


def _names(words: list[str]) -> list[str]:
    """The command path an example runs: the leading words (options skipped) that name subcommands."""
    commands = _commands()
    path: list[str] = []
    for w in words[1:]:
        if not w.startswith("-") and " ".join([*path, w]) in commands:
            path.append(w)
    return path
