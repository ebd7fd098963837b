"""The effective configuration of one command: ``--set`` > environment > ``--config`` file > defaults.

Loaded once per command (``load``) and passed down; the values carry their sources,
which ``config show`` prints.
"""

from __future__ import annotations

from deletion_service.cli.options import CommonOptions
from deletion_service.config import LoadedConfig, load_config
from deletion_service.errors import UsageError


def load(opts: CommonOptions) -> LoadedConfig:
    return load_config(opts.config, overrides=set_overrides(opts))


def set_overrides(opts: CommonOptions) -> dict[str, str]:
    """``--set KEY=VALUE`` options as a mapping; a malformed one is a usage error."""
    out = {}
    for item in opts.settings:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out
