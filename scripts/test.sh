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
command -v promtool >/dev/null 2>&1 || apt_missing+=(prometheus)  # promtool checks the alert rules; the server runs them
command -v prometheus-pushgateway >/dev/null 2>&1 || apt_missing+=(prometheus-pushgateway)  # scan-orphans --pushgateway
[ -x /usr/bin/chromium ] || apt_missing+=(chromium)  # playwright opens report.html in it (no browser download)
if [ ${#apt_missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing Debian packages: ${apt_missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${apt_missing[@]}" >/dev/null
fi

bash scripts/venv.sh
export PATH="$PWD/.venv/bin:$PATH"  # tools the tests start (schemathesis, moto_server) come from the venv
py=.venv/bin/python
$py -m pip install -q --disable-pip-version-check -e '.[test]'
$py -m ruff check .
# the type checker (configured in pyproject.toml) resolves imports through this interpreter
.venv/bin/basedpyright --project pyproject.toml --pythonpath "$PWD/.venv/bin/python"  # this project's config, never a stray one above it

set +e
# Two processes, each with its own session servers (ZooKeeper, pulsar-lite, moto_server) and a chroot
# or namespace per test as before; `-n 0` as an argument runs in one process.
$py -m pytest -p no:cacheprovider -n 2 "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
exit "$rc"
