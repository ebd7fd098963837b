#!/usr/bin/env bash
# Install everything the tests need on a fresh Debian machine (Python 3.11 and Java 17 present),
# then lint and run the whole suite. Extra arguments go to pytest.
#
# Python packages go into ./.venv (scripts/venv.sh), never into the system's Python: Debian 12
# and Ubuntu 24.04 refuse `pip install` there (PEP 668, "externally-managed-environment").
set -euo pipefail
cd "$(dirname "$0")/.."

apt_missing=()
[ -f /usr/share/java/zookeeper.jar ] || apt_missing+=(zookeeper)
# the tests run these at their packaged paths (tests/support/harness.py debian_tool), never PATH's
[ -x /usr/bin/promtool ] || apt_missing+=(prometheus)  # promtool checks the alert rules; the server runs them
[ -x /usr/bin/prometheus-pushgateway ] || apt_missing+=(prometheus-pushgateway)  # scan-orphans --pushgateway
[ -x /usr/bin/chromium ] || apt_missing+=(chromium)  # playwright opens report.html in it (no browser download)
[ -x /usr/bin/faketime ] || apt_missing+=(faketime)  # a daemon replica whose clock runs ahead (libfaketime)
if [ ${#apt_missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing Debian packages: ${apt_missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${apt_missing[@]}" >/dev/null
fi

bash scripts/venv.sh
# No venv on PATH: the tests start the venv's tools (moto_server, schemathesis, hadolint) beside their
# interpreter (tests/support/harness.py venv_tool), so this run finds the same ones as `.venv/bin/python -m pytest`.
py=.venv/bin/python
$py -m pip install -q --disable-pip-version-check --no-compile -e '.[test]'
# Bytecode, written once here: the suite starts about a thousand `ledger-deletion` processes, and where
# PYTHONDONTWRITEBYTECODE is set each would compile what it imports anew.  pip would compile the
# installed packages one file at a time (about 20 s); compileall uses every core.
site_packages="$($py -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
$py -m compileall -q -j 0 "$site_packages" >/dev/null 2>&1 || true  # a speed-up: never a reason to stop
$py -m compileall -q -j 0 deletion_service metastore offloaders tests bench >/dev/null
$py -m ruff check .
# The type checker (configured in pyproject.toml) resolves imports through this interpreter and reads
# this project's config, never a stray one above it.  It runs beside the suite (about half a minute of
# one core) and its verdict counts as much as the suite's: either failing fails the command.
typecheck_log="$(mktemp)"
.venv/bin/basedpyright --project pyproject.toml --pythonpath "$PWD/.venv/bin/python" >"$typecheck_log" 2>&1 &
typecheck_pid=$!
# pytest rewrites each test module's asserts and keeps the result only where bytecode may be written:
# one collection here with writing allowed spares each test process rewriting ~500 modules (~6 s of CPU).
env -u PYTHONDONTWRITEBYTECODE $py -m pytest -p no:cacheprovider --collect-only -q >/dev/null 2>&1 || true

set +e
# Six processes on two cores: the tests mostly wait (on daemons, on the broker's statistics, on Spark),
# so six keep about 1.8 cores busy where two kept 1.2 (pytest alone, measured on one machine: 10.9 min
# with four, 10.2 with six).  Each has its own session servers (ZooKeeper, pulsar-lite, moto_server)
# and a chroot or namespace per test; `-n 0` as an argument runs in one process.  loadgroup keeps a
# module that shares a module-scoped fixture of its own on one worker (tests/conftest.py), and starts
# the slowest modules first.
$py -m pytest -p no:cacheprovider -n 6 --dist loadgroup "$@"
rc=$?
wait "$typecheck_pid"
typecheck_rc=$?
set -e
echo "type check (basedpyright):"
cat "$typecheck_log"
rm -f "$typecheck_log"
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
if [ "$typecheck_rc" -ne 0 ]; then
  echo "the type check failed (above)" >&2
  [ "$rc" -eq 0 ] && exit 1
fi
exit "$rc"
