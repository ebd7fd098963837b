"""``load_config`` returns each value with the source it came from (``config show`` prints them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deletion_service.config import LoadedConfig, Source, load_config
from deletion_service.errors import UserError


def _load(tmp_path: Path, toml: str, env: dict[str, str], flags: dict[str, str]) -> LoadedConfig:
    file = tmp_path / "c.toml"
    file.write_text(toml)
    return load_config(file, env=env, overrides=flags)


def test_every_key_carries_the_source_that_won(tmp_path: Path) -> None:
    loaded = _load(
        tmp_path,
        "twoPhaseDeletionMaxRetryDeleteCount = 3\nminLedgerAgeSeconds = 60\nmaxDeletionsPerSecond = 5\n",
        {"LEDGER_DELETION_MIN_LEDGER_AGE_SECONDS": "120", "LEDGER_DELETION_MAX_DELETIONS_PER_SECOND": "7"},
        {"maxDeletionsPerSecond": "9"},
    )
    cfg = loaded.config
    assert (cfg.two_phase_deletion_max_retry_delete_count, cfg.min_ledger_age_seconds,
            cfg.max_deletions_per_second) == (3, 120, 9)
    assert loaded.source("twoPhaseDeletionMaxRetryDeleteCount") == Source("file", str(tmp_path / "c.toml"))
    assert loaded.source("minLedgerAgeSeconds") == Source("env", "LEDGER_DELETION_MIN_LEDGER_AGE_SECONDS")
    assert loaded.source("maxDeletionsPerSecond").label() == "--set"
    assert loaded.source("twoPhaseDeletionReconsumeLaterInSeconds").label() == "default"
    assert set(loaded.sources) == set(cfg.camel())  # one source per key, none invented


def test_a_snake_case_key_in_the_file_is_unknown_and_names_the_pulsar_spelling(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="unknown config key 'min_ledger_age_seconds'.*did you mean minLedgerAge"):
        _load(tmp_path, "min_ledger_age_seconds = 5\n", {}, {})


@pytest.mark.parametrize("env,flags,where", [
    ({"LEDGER_DELETION_MIN_LEDGER_AGE_SECONDS": "-1"}, {}, "$LEDGER_DELETION_MIN_LEDGER_AGE_SECONDS"),
    ({}, {"minLedgerAgeSeconds": "soon"}, "command line"),
])
def test_a_bad_value_names_the_source_it_came_from(tmp_path: Path, env: dict[str, str], flags: dict[str, str],
                                                   where: str) -> None:
    with pytest.raises(UserError, match=f"invalid value for minLedgerAgeSeconds in {where.replace('$', '[$]')}"):
        _load(tmp_path, "minLedgerAgeSeconds = 1\n", env, flags)


def test_the_ack_state_budget_keys_follow_the_seed(tmp_path: Path) -> None:
    """1 KiB..5 MiB, pausing on by default, and a byte limit that is set wins over the range count."""
    from deletion_service.cursor.ack_budget import PersistBudget

    defaults = PersistBudget.from_config(_load(tmp_path, "", {}, {}).config)
    assert defaults == PersistBudget(max_bytes=5 * 1024 * 1024, max_ranges=None, pause_dispatch=True)
    count_only = _load(tmp_path, "managedLedgerMaxUnackedRangesToPersist = 10000\n", {}, {}).config
    assert PersistBudget.from_config(count_only).max_ranges == 10000
    both = _load(tmp_path, "managedLedgerMaxUnackedRangesToPersist = 10000\n",
                 {"LEDGER_DELETION_MANAGED_LEDGER_MAX_ACK_STATE_IN_BYTES_TO_PERSIST": "65536"}, {}).config
    assert PersistBudget.from_config(both) == PersistBudget(max_bytes=65536, max_ranges=None, pause_dispatch=True)
    for bad in ("1023", str(5 * 1024 * 1024 + 1)):
        with pytest.raises(UserError, match="managedLedgerMaxAckStateInBytesToPersist"):
            _load(tmp_path, "", {}, {"managedLedgerMaxAckStateInBytesToPersist": bad})
