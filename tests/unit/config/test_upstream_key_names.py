"""Upstream Pulsar's shipped key names are accepted beside ours, and an unknown key names the closest."""

from __future__ import annotations

import pytest

from deletion_service.config import load_config
from deletion_service.errors import UserError

UPSTREAM = "dispatcherPauseOnAckStatePersistentEnabled"  # as the broker shipped it
OURS = "dispatcherPauseOnAckPersistentStateEnabled"  # as the proposal spells it


def test_upstreams_spelling_sets_our_key_from_a_file_the_environment_and_a_flag(tmp_path) -> None:  # noqa: ANN001
    conf = tmp_path / "c.toml"
    conf.write_text(f"{UPSTREAM} = false\n")
    assert load_config(conf, env={}).config.dispatcher_pause_on_ack_persistent_state_enabled is False
    env = {"LEDGER_DELETION_DISPATCHER_PAUSE_ON_ACK_STATE_PERSISTENT_ENABLED": "false"}
    loaded = load_config(env=env)
    assert loaded.config.dispatcher_pause_on_ack_persistent_state_enabled is False
    assert loaded.source(OURS).kind == "env"
    flagged = load_config(env={}, overrides={UPSTREAM: False})
    assert flagged.config.dispatcher_pause_on_ack_persistent_state_enabled is False
    assert load_config(env={}).config.dispatcher_pause_on_ack_persistent_state_enabled is True  # our default


def test_both_spellings_in_one_place_is_an_error(tmp_path) -> None:  # noqa: ANN001
    conf = tmp_path / "c.toml"
    conf.write_text(f"{UPSTREAM} = false\n{OURS} = true\n")
    with pytest.raises(UserError, match="both set in .*keep one"):
        load_config(conf, env={})


@pytest.mark.parametrize("typo,closest", [
    ("minLedgerAgeSecond", "minLedgerAgeSeconds"),
    ("twoPhaseDeletionMaxRetryCount", "twoPhaseDeletionMaxRetryDeleteCount"),
    ("min_ledger_age_seconds", "minLedgerAgeSeconds"),
    ("dispatcherPauseOnAckStatePersistEnabled", UPSTREAM),
])
def test_an_unknown_key_names_the_closest(typo: str, closest: str) -> None:
    with pytest.raises(UserError, match=f"unknown config key '{typo}'.*did you mean {closest}\\?"):
        load_config(env={}, overrides={typo: 1})
