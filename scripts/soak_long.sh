#!/usr/bin/env bash
# The soak-length runs the suite keeps short (so the README's test command stays under 15 minutes):
# the same tests and assertions at full length, about 8 minutes on 2 cores.
#
#   safety interleaving   200 rounds, 150 s budget   (suite: 60 rounds, 45 s)
#   scopes interleaving    60 rounds,  25 s budget   (suite: 30 rounds, 15 s)
#   kill soak              30 kills, every failpoint twice (suite: 15, each once; scripts/soak.py for 1000)
#   DLQ fuzz             1500 hypothesis examples per property (suite: 300)
#
# Each length can still be set from the environment (SAFETY_ROUNDS, SCOPES_ROUNDS, SOAK_KILLS, ...);
# seeds replay as in the suite (SAFETY_SEED, SCOPES_SEED, SOAK_SEED). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"  # moto_server comes from the venv
export SAFETY_ROUNDS="${SAFETY_ROUNDS:-200}" SAFETY_BUDGET_S="${SAFETY_BUDGET_S:-150}"
export SCOPES_ROUNDS="${SCOPES_ROUNDS:-60}" SCOPES_BUDGET_S="${SCOPES_BUDGET_S:-25}"
export SOAK_KILLS="${SOAK_KILLS:-30}" DLQ_FUZZ_EXAMPLES="${DLQ_FUZZ_EXAMPLES:-1500}"
exec .venv/bin/python -m pytest -p no:cacheprovider -q \
  tests/integration/interleavings/test_trim_daemon_and_resets.py::test_randomized_interleavings_never_delete_a_referenced_ledger_nor_leak \
  tests/integration/interleavings/test_cross_namespace_and_shared_segments.py \
  tests/soak/test_bounded_kill_soak.py::test_bounded_kill_soak_keeps_both_invariants_and_leaks_nothing \
  tests/system/dlq/test_dlq_readers_fuzz.py \
  "$@"
